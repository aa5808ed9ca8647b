package disk

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"herd.dev/herd/internal/statefile"
)

// Record is what herd image disk keeps of the last disk it made of a node image, so that herd
// image ls shows it and herd image push finds it.
type Record struct {
	// Path is the disk file, absolute.
	Path string `json:"path"`
	// Digest is the disk's, as it was made.
	Digest string `json:"digest"`
	// Size and Allocated are the disk's sizes in bytes: as it was made, or as it is now when
	// the record is loaded.
	Size      int64 `json:"size"`
	Allocated int64 `json:"allocated"`
}

func recordPath(dir, image string) string {
	return filepath.Join(dir, strings.TrimPrefix(image, "sha256:")+".json")
}

// SaveRecord keeps r as the disk of node image in dir.
func SaveRecord(dir, image string, r Result) error {
	path, err := filepath.Abs(r.Path)
	if err != nil {
		return err
	}
	return statefile.WriteJSON(recordPath(dir, image), Record{Path: path, Digest: r.Digest, Size: r.Size, Allocated: r.Allocated})
}

// LoadRecord returns the disk kept for node image in dir, with its sizes as they are now; ok is
// false when none was made or its file is gone.
func LoadRecord(dir, image string) (r Record, ok bool, err error) {
	if found, err := statefile.ReadJSON(recordPath(dir, image), &r); err != nil || !found {
		return r, false, err
	}
	fi, err := os.Stat(r.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r.Size = fi.Size()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		r.Allocated = st.Blocks * 512
	}
	return r, true, nil
}
