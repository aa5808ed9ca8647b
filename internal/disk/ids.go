// The disk's ids, derived from what it is made of instead of drawn at random, so that the same
// inputs give the same disk.

package disk

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ids are the GUIDs and ids a disk needs.
type ids struct {
	diskGUID, espGUID, rootGUID string // GPT: the disk's and the partitions' unique GUIDs
	rootUUID, hashSeed          string // ext4: the file system UUID and the directory hash seed
	espVolumeID                 string // FAT: the volume id (8 hex digits)
}

// newIDs derives every id from the bundle's and the agent's digests.
func newIDs(bundleDigest, agentDigest string) ids {
	seed := bundleDigest + "\n" + agentDigest
	return ids{
		diskGUID:    derivedUUID(seed, "gpt disk"),
		espGUID:     derivedUUID(seed, "gpt esp"),
		rootGUID:    derivedUUID(seed, "gpt root"),
		rootUUID:    derivedUUID(seed, "ext4 uuid"),
		hashSeed:    derivedUUID(seed, "ext4 hash seed"),
		espVolumeID: hex.EncodeToString(derived(seed, "fat volume id")[:4]),
	}
}

func derived(seed, purpose string) []byte {
	h := sha256.Sum256([]byte("herd disk " + purpose + "\n" + seed))
	return h[:]
}

// derivedUUID is a version 4 (random) UUID whose random bits are a hash of seed and purpose.
func derivedUUID(seed, purpose string) string {
	b := derived(seed, purpose)[:16]
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
