package image

import (
	"strings"

	"herd.dev/herd/internal/image/bundle"
)

// The bundle format lives in package bundle, which the agent reads without linking the builder;
// these names keep the builder's and its callers' code as it was.
type (
	// Config is bundle.Config.
	Config = bundle.Config
	// ImageRecord is bundle.ImageRecord.
	ImageRecord = bundle.ImageRecord
	// FileRecord is bundle.FileRecord.
	FileRecord = bundle.FileRecord
	// Bundle is bundle.Bundle.
	Bundle = bundle.Bundle
)

const (
	// SchemaVersion is bundle.SchemaVersion.
	SchemaVersion = bundle.SchemaVersion
	// ConfigFile is bundle.ConfigFile.
	ConfigFile = bundle.ConfigFile
	// PauseImage is bundle.PauseImage.
	PauseImage = bundle.PauseImage
)

// parseDigest checks that d is "sha256:" followed by 64 lower-case hex digits and returns the hex.
func parseDigest(d string) (string, bool) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || !isHex(h) {
		return "", false
	}
	return h, true
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
