package bolt

import bbolt "go.etcd.io/bbolt"

// SetFormatForTest stamps the file at path with another format, as a future herd would.
func SetFormatForTest(path, f string) error {
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(metaBucket).Put(formatKey, []byte(f)) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
