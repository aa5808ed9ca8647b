package ami

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ebs"
	ebstypes "github.com/aws/aws-sdk-go-v2/service/ebs/types"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// BlockSize is the EBS direct APIs' block: 512 KiB.
const BlockSize = 512 << 10

type ebsTag = ebstypes.Tag

// putAttempts is how many times a block is sent when EBS refuses it as invalid: a block whose
// data was corrupted on its way no longer matches its checksum, and sending it again fixes that.
const putAttempts = 3

// upload is the disk's blocks on their way to one snapshot.
type upload struct {
	f    *os.File
	size int64
	// blocks are the indexes of the blocks that hold data: the others lie in holes.
	blocks []int32

	mu      sync.Mutex
	sums    map[int32][32]byte // the blocks sent
	sent    int
	skipped int
}

func openUpload(path string) (*upload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the disk: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	u := &upload{f: f, size: fi.Size(), sums: map[int32][32]byte{}}
	if u.blocks, err = dataBlocks(f, u.size); err != nil {
		f.Close()
		return nil, fmt.Errorf("find the data of %s: %w", path, err)
	}
	return u, nil
}

func (u *upload) close() { u.f.Close() }

// volumeGiB is the volume's size: the disk's, rounded up to GiB as EBS counts them.
func (u *upload) volumeGiB() int64 { return max(1, (u.size+(1<<30)-1)>>30) }

// dataBlocks lists, in order, the blocks of f that hold data according to SEEK_DATA and
// SEEK_HOLE, so that the holes of a sparse disk are never read. A file system that does not
// know holes reports the whole file as data.
func dataBlocks(f *os.File, size int64) ([]int32, error) {
	var blocks []int32
	for off := int64(0); off < size; {
		data, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, err
		}
		hole, err := f.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		for b := data / BlockSize; b*BlockSize < hole; b++ {
			if n := len(blocks); n == 0 || blocks[n-1] < int32(b) {
				blocks = append(blocks, int32(b))
			}
		}
		off = hole
	}
	return blocks, nil
}

var zeroBlock = make([]byte, BlockSize)

// send reads the blocks that hold data in order and sends those that are not all zeros,
// parallel at once, each with its SHA-256.
func (u *upload) send(ctx context.Context, api ebsAPI, snap string, parallel int, progress func(Progress)) error {
	began := time.Now()
	var bytesSent int64
	report := func() {
		if progress != nil {
			progress(Progress{Done: u.sent + u.skipped, Sent: u.sent, Total: len(u.blocks), Bytes: bytesSent, Elapsed: time.Since(began)})
		}
	}
	pool := sync.Pool{New: func() any { return make([]byte, BlockSize) }}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, index := range u.blocks {
		if gctx.Err() != nil {
			break
		}
		buf := pool.Get().([]byte)
		n, err := u.f.ReadAt(buf, int64(index)*BlockSize)
		if err != nil && !errors.Is(err, io.EOF) {
			return errors.Join(fmt.Errorf("read block %d of the disk: %w", index, err), g.Wait())
		}
		clear(buf[n:]) // the last block is padded with zeros
		if bytes.Equal(buf, zeroBlock) {
			pool.Put(buf)
			u.mu.Lock()
			u.skipped++
			report()
			u.mu.Unlock()
			continue
		}
		g.Go(func() error {
			defer pool.Put(buf)
			sum := sha256.Sum256(buf)
			if err := put(gctx, api, snap, index, buf, sum); err != nil {
				return err
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			u.sums[index] = sum
			u.sent++
			bytesSent += BlockSize
			report()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

func put(ctx context.Context, api ebsAPI, snap string, index int32, data []byte, sum [32]byte) error {
	var err error
	for range putAttempts {
		_, err = api.PutSnapshotBlock(ctx, &ebs.PutSnapshotBlockInput{SnapshotId: aws.String(snap), BlockIndex: aws.Int32(index),
			BlockData: bytes.NewReader(data), DataLength: aws.Int32(BlockSize),
			Checksum: aws.String(base64.StdEncoding.EncodeToString(sum[:])), ChecksumAlgorithm: ebstypes.ChecksumAlgorithmChecksumAlgorithmSha256})
		var invalid *ebstypes.ValidationException
		if !errors.As(err, &invalid) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("put block %d of snapshot %s: %w", index, snap, explain(err))
	}
	return nil
}

// completion seals the snapshot with the SHA-256 of the sent blocks' checksums in block order
// (the LINEAR aggregation), so that EBS checks it holds exactly the blocks sent.
func (u *upload) completion(snap string) *ebs.CompleteSnapshotInput {
	h := sha256.New()
	for _, i := range slices.Sorted(maps.Keys(u.sums)) {
		sum := u.sums[i]
		h.Write(sum[:])
	}
	return &ebs.CompleteSnapshotInput{SnapshotId: aws.String(snap), ChangedBlocksCount: aws.Int32(int32(len(u.sums))),
		Checksum: aws.String(base64.StdEncoding.EncodeToString(h.Sum(nil))), ChecksumAlgorithm: ebstypes.ChecksumAlgorithmChecksumAlgorithmSha256,
		ChecksumAggregationMethod: ebstypes.ChecksumAggregationMethodChecksumAggregationLinear}
}
