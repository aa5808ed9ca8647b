package containerdstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// normaliseBolt writes the bbolt database at file again, into a fresh file: the same buckets,
// keys, values and sequences, but every value that is a time stamp between from and to (a
// time.Time in its binary form, as containerd keeps them) set to epoch.
func normaliseBolt(file string, epoch, from, to time.Time) error {
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	src, err := bolt.Open(file, 0, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := file + ".new"
	os.Remove(tmp)
	// NoSync: one sync at the end rather than one per transaction.
	dst, err := bolt.Open(tmp, fi.Mode().Perm(), &bolt.Options{NoSync: true})
	if err != nil {
		return err
	}
	stamp := func(v []byte) []byte {
		var t time.Time
		if (len(v) != 15 && len(v) != 16) || t.UnmarshalBinary(v) != nil || t.Before(from) || t.After(to) {
			return v
		}
		out, err := epoch.In(t.Location()).MarshalBinary()
		if err != nil {
			return v
		}
		return out
	}
	err = src.View(func(stx *bolt.Tx) error {
		return stx.ForEach(func(name []byte, sb *bolt.Bucket) error {
			return copyBucket(dst, [][]byte{name}, sb, stamp)
		})
	})
	if err := errors.Join(err, dst.Sync(), dst.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}

// copyBucket copies src into the bucket at path of dst, in key order: its sequence and values in
// one transaction, then each nested bucket in transactions of its own. One bucket a transaction,
// because bbolt allocates the pages of the buckets a transaction changed in the order of a Go
// map, which differs from run to run: the same records written in one transaction gave files
// that differed.
func copyBucket(dst *bolt.DB, path [][]byte, src *bolt.Bucket, stamp func([]byte) []byte) error {
	err := dst.Update(func(tx *bolt.Tx) error {
		// The parents were made by the transactions before.
		var b *bolt.Bucket
		var err error
		if len(path) == 1 {
			b, err = tx.CreateBucket(path[0])
		} else {
			b = tx.Bucket(path[0])
			for _, name := range path[1 : len(path)-1] {
				b = b.Bucket(name)
			}
			b, err = b.CreateBucket(path[len(path)-1])
		}
		if err != nil {
			return err
		}
		if err := b.SetSequence(src.Sequence()); err != nil {
			return err
		}
		return src.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			return b.Put(k, stamp(v))
		})
	})
	if err != nil {
		return fmt.Errorf("%s: %w", bytes.Join(path, []byte("/")), err)
	}
	return src.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		return copyBucket(dst, append(path[:len(path):len(path)], k), src.Bucket(k), stamp)
	})
}
