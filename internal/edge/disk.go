package edge

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// The disk tier keeps entries in files, one per primary key, bounded by bytes, so that what the
// edge fetched outlives a restart and more than its memory holds. An entry stored in memory is
// queued for writing; a memory miss looks on disk and brings what it finds back into memory.
//
// A file is never seen half written: it is written under a temporary name, synced, and only then
// renamed to its final name, and it ends with the SHA-256 of what precedes it, checked on every
// read, so that a file damaged after the fact is dropped instead of served. Temporary files left by
// a crash are removed when the tier opens. Each write gets a new file name, so that removing the
// file of an entry replaced or evicted never removes the file of its successor.
//
// A file is: diskMagic, the primary key's length (uint32, big endian) and the key, the entry in
// gob, then the SHA-256 of all of that.

const diskMagic = "herdedg1"

// diskQueue bounds the entries waiting to be written: past it they are dropped, as a disk tier is
// a second chance, not a promise.
const diskQueue = 1024

// diskFile is where one entry is on disk.
type diskFile struct {
	name string
	size int64
}

// disk is the disk tier.
type disk struct {
	dir   string
	index *otter.Cache[string, diskFile] // by primary key, weighed by file size
	queue chan diskWrite
	log   *slog.Logger
	// epoch counts invalidations: a write queued before one is dropped, as it may hold what the
	// invalidation removed. mu orders an invalidation and the indexing of a file just written.
	epoch atomic.Int64
	mu    sync.Mutex
	seq   atomic.Int64 // makes file names unique
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

type diskWrite struct {
	pk    string
	e     *entry
	epoch int64
}

// openDisk opens (or makes) the disk tier in dir, bounded by maxBytes: temporary files of an
// interrupted write are removed, and the files there are indexed by the key they hold.
func openDisk(dir string, maxBytes int64, log *slog.Logger) (*disk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("edge disk tier: %w", err)
	}
	d := &disk{dir: dir, queue: make(chan diskWrite, diskQueue), log: log, stop: make(chan struct{}), done: make(chan struct{})}
	d.index = otter.Must(&otter.Options[string, diskFile]{
		MaximumWeight: uint64(maxBytes),
		Weigher: func(_ string, f diskFile) uint32 {
			return uint32(min(f.size, int64(^uint32(0))))
		},
		OnDeletion: func(ev otter.DeletionEvent[string, diskFile]) {
			if err := os.Remove(filepath.Join(d.dir, ev.Value.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.log.Warn("edge disk tier: removing a file", "file", ev.Value.name, "err", err)
			}
		},
	})
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("edge disk tier: %w", err)
	}
	for _, de := range names { // sorted by name: a later write of a key comes after an earlier one
		name := de.Name()
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			os.Remove(filepath.Join(dir, name)) // a write a crash interrupted
		case strings.HasSuffix(name, ".obj"):
			pk, size, err := readKey(filepath.Join(dir, name))
			if err != nil {
				log.Warn("edge disk tier: dropping an unreadable file", "file", name, "err", err)
				os.Remove(filepath.Join(dir, name))
				continue
			}
			d.index.Set(pk, diskFile{name: name, size: size}) // replaces, and so removes, an older file of pk
		}
	}
	d.seq.Store(time.Now().UnixNano())
	go d.writer()
	return d, nil
}

// readKey reads the primary key at the head of a file, and the file's size.
func readKey(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	head := make([]byte, len(diskMagic)+4)
	if _, err := io.ReadFull(f, head); err != nil || string(head[:len(diskMagic)]) != diskMagic {
		return "", 0, errors.New("not an edge object file")
	}
	n := binary.BigEndian.Uint32(head[len(diskMagic):])
	if int64(n) > fi.Size() {
		return "", 0, errors.New("key longer than the file")
	}
	key := make([]byte, n)
	if _, err := io.ReadFull(f, key); err != nil {
		return "", 0, err
	}
	return string(key), fi.Size(), nil
}

// put queues e, just stored in memory at pk, for writing.
func (d *disk) put(pk string, e *entry) {
	select {
	case d.queue <- diskWrite{pk: pk, e: e, epoch: d.epoch.Load()}:
	default:
		d.log.Debug("edge disk tier: write queue full, not written", "key", pk)
	}
}

// writer writes the queued entries until the tier is closed, and then what is left queued.
func (d *disk) writer() {
	defer close(d.done)
	for {
		select {
		case w := <-d.queue:
			d.land(w)
		case <-d.stop:
			for {
				select {
				case w := <-d.queue:
					d.land(w)
				default:
					return
				}
			}
		}
	}
}

// land writes one queued entry and indexes its file, unless an invalidation came since it was
// queued.
func (d *disk) land(w diskWrite) {
	if w.epoch != d.epoch.Load() {
		return
	}
	f, err := d.write(w.pk, w.e)
	if err != nil {
		d.log.Warn("edge disk tier: writing an entry", "key", w.pk, "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.epoch != d.epoch.Load() { // invalidated while it was written
		os.Remove(filepath.Join(d.dir, f.name))
		return
	}
	d.index.Set(w.pk, f)
}

// diskWriteHook, when set (tests), is called with the file being written once half of it is.
var diskWriteHook func(path string)

// write writes e to a new file: a temporary one, synced, then renamed.
func (d *disk) write(pk string, e *entry) (diskFile, error) {
	data, err := encodeEntry(pk, e)
	if err != nil {
		return diskFile{}, err
	}
	tmp, err := os.CreateTemp(d.dir, ".tmp-")
	if err != nil {
		return diskFile{}, err
	}
	defer os.Remove(tmp.Name()) // gone once renamed; removed if anything failed
	half := len(data) / 2
	_, err = tmp.Write(data[:half])
	if err == nil && diskWriteHook != nil {
		diskWriteHook(tmp.Name())
	}
	if err == nil {
		_, err = tmp.Write(data[half:])
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return diskFile{}, err
	}
	sum := sha256.Sum256([]byte(pk))
	name := fmt.Sprintf("%x-%s.obj", sum[:8], strconv.FormatInt(d.seq.Add(1), 36))
	if err := os.Rename(tmp.Name(), filepath.Join(d.dir, name)); err != nil {
		return diskFile{}, err
	}
	return diskFile{name: name, size: int64(len(data))}, nil
}

// lookup reads the entry at pk, if the disk has it whole; a file that fails its checksum or does
// not decode is dropped.
func (d *disk) lookup(pk string) *entry {
	f, ok := d.index.GetIfPresent(pk)
	if !ok {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(d.dir, f.name))
	if err != nil {
		d.index.Invalidate(pk)
		return nil
	}
	e, err := decodeEntry(pk, data)
	if err != nil {
		d.log.Warn("edge disk tier: dropping a damaged file", "file", f.name, "err", err)
		d.index.Invalidate(pk)
		return nil
	}
	return e
}

// invalidate removes pk's file, and keeps the writes queued before from landing.
func (d *disk) invalidate(pk string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.epoch.Add(1)
	_, ok := d.index.Invalidate(pk)
	return ok
}

// close writes what is queued and stops the writer; entries put later are not written.
func (d *disk) close() {
	d.once.Do(func() { close(d.stop) })
	<-d.done
}

// diskObject and diskEntry are what gob writes of an object and an entry.
type diskObject struct {
	Status                    int
	Header                    http.Header
	Body                      []byte
	RequestTime, ResponseTime time.Time
	Lifetime                  time.Duration
	Secondary                 string
}

type diskEntry struct {
	Vary     []string
	Variants map[string]diskObject
}

func encodeEntry(pk string, e *entry) ([]byte, error) {
	de := diskEntry{Vary: e.vary, Variants: map[string]diskObject{}}
	for _, v := range e.variants {
		o := v.o
		de.Variants[v.key] = diskObject{Status: int(o.status), Header: o.header(), Body: o.body(),
			RequestTime: o.requestTime(), ResponseTime: o.responseTime, Lifetime: o.lifetime, Secondary: o.secondary}
	}
	var buf bytes.Buffer
	buf.WriteString(diskMagic)
	buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(pk))))
	buf.WriteString(pk)
	if err := gob.NewEncoder(&buf).Encode(de); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes(), nil
}

func decodeEntry(pk string, data []byte) (*entry, error) {
	head := len(diskMagic) + 4 + len(pk)
	if len(data) < head+sha256.Size {
		return nil, errors.New("file too short")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("checksum mismatch")
	}
	if string(body[:len(diskMagic)]) != diskMagic || string(body[len(diskMagic)+4:head]) != pk {
		return nil, errors.New("not this key's file")
	}
	var de diskEntry
	if err := gob.NewDecoder(bytes.NewReader(body[head:])).Decode(&de); err != nil {
		return nil, err
	}
	e := &entry{vary: de.Vary, variants: make([]variant, 0, len(de.Variants))}
	for k, o := range de.Variants {
		obj := newObject(o.Status, o.Header, o.Body, o.RequestTime, o.ResponseTime, o.Lifetime)
		obj.secondary = o.Secondary
		e.variants = append(e.variants, variant{k, obj})
	}
	e.retain = e.retention()
	return e, nil
}
