package containerdstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var epoch = time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)

// TestNormaliseBolt writes the same records into two databases in different orders, at
// different times, each with a record deleted on the way, and wants the same bytes from both
// once normalised: the time stamps of the build at the epoch, the other times as they were.
func TestNormaliseBolt(t *testing.T) {
	dir := t.TempDir()
	layerTime, err := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Minute)
	// Each database's records are made at times of their own within the build.
	write := func(name string, reverse bool, scratch string, made time.Duration) string {
		p := filepath.Join(dir, name)
		db, err := bolt.Open(p, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		keys := []string{"sha256:aa", "sha256:bb", "sha256:cc"}
		if reverse {
			keys = []string{"sha256:cc", "sha256:bb", "sha256:aa"}
		}
		for i, k := range keys {
			// A transaction per record, as containerd's, so that pages are freed and reused.
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("v1"))
				if err != nil {
					return err
				}
				if _, err := b.NextSequence(); err != nil {
					return err
				}
				rec, err := b.CreateBucket([]byte(k))
				if err != nil {
					return err
				}
				now, err := from.Add(made + time.Duration(i)*time.Millisecond).UTC().MarshalBinary()
				if err != nil {
					return err
				}
				if err := rec.Put([]byte("createdat"), now); err != nil {
					return err
				}
				if err := rec.Put([]byte("layertime"), layerTime); err != nil {
					return err
				}
				return b.Put([]byte(scratch+k), bytes.Repeat([]byte(scratch), 200))
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("v1"))
			for _, k := range keys {
				if err := b.Delete([]byte(scratch + k)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := write("a.db", false, "extract-1-", 10*time.Second), write("b.db", true, "extract-22-", 20*time.Second)
	to := time.Now().Add(time.Minute)
	var files [][]byte
	for _, p := range []string{a, b} {
		if err := normaliseBolt(p, epoch, from, to); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, data)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("the same records gave different files")
	}
	db, err := bolt.Open(a, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		v1 := tx.Bucket([]byte("v1"))
		if v1.Sequence() != 3 {
			return fmt.Errorf("sequence %d, want 3", v1.Sequence())
		}
		rec := v1.Bucket([]byte("sha256:bb"))
		if rec == nil {
			return fmt.Errorf("record sha256:bb lost")
		}
		var created time.Time
		if err := created.UnmarshalBinary(rec.Get([]byte("createdat"))); err != nil || !created.Equal(epoch) {
			return fmt.Errorf("createdat %v (%v), want the epoch %v", created, err, epoch)
		}
		if got := rec.Get([]byte("layertime")); !bytes.Equal(got, layerTime) {
			return fmt.Errorf("a time from before the build was changed")
		}
		if v1.Get([]byte("extract-1-sha256:aa")) != nil {
			return fmt.Errorf("a deleted record came back")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
