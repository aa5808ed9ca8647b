package store

import (
	"errors"
	"fmt"
)

// The rules of a write live here, once, so that every implementation applies them the same way; an
// implementation only finds the stored record, calls Apply and stores the outcome.

func (t OpType) String() string {
	switch t {
	case OpCreate:
		return "create"
	case OpUpdate:
		return "update"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("OpType(%d)", int(t))
}

// CheckOps reports the first op that no store could apply whatever it holds: an empty kind or name,
// an unknown type, a create that names a resource version, a resource version on a key an earlier
// op of the Txn writes (the only version it could match is the Txn's own, which the caller cannot
// know before the Txn commits). Implementations call it before they touch anything.
func CheckOps(ops []Op) error {
	type key struct{ kind, name string }
	written := make(map[key]bool, len(ops))
	for i, op := range ops {
		var problem string
		k := key{op.Kind, op.Name}
		switch {
		case op.Kind == "":
			problem = "kind is empty"
		case op.Name == "":
			problem = "name is empty"
		case op.Type < OpCreate || op.Type > OpDelete:
			problem = "unknown op type"
		case op.Type == OpCreate && op.ResourceVersion != 0:
			problem = fmt.Sprintf("a create cannot require resource version %d: use OpUpdate or OpPut", op.ResourceVersion)
		case op.ResourceVersion < 0:
			problem = fmt.Sprintf("resource version %d is negative", op.ResourceVersion)
		case op.ResourceVersion != 0 && written[k]:
			problem = fmt.Sprintf("resource version %d names a version of a key an earlier op of this Txn writes: drop it", op.ResourceVersion)
		}
		written[k] = true
		if problem != "" {
			return fmt.Errorf("txn op %d (%s %s/%s): %s", i, op.Type, op.Kind, op.Name, problem)
		}
	}
	return nil
}

// Apply works out what op does as the write of revision rev, given cur, the stored record of op's
// key (nil if there is none). It returns the watch event of the write: for Added and Modified the
// record to store, for Deleted the last value stamped with rev. The error, if any, names the op's
// kind and name and wraps ErrExists, ErrNotFound or ErrConflict. Apply keeps op.Value as is: an
// implementation that stores it copies it first if the caller could still change it.
func Apply(op Op, cur *Record, rev int64) (Event, error) {
	fail := func(err error) (Event, error) {
		return Event{}, fmt.Errorf("%s %s/%s: %w", op.Type, op.Kind, op.Name, err)
	}
	if cur == nil {
		switch {
		case op.Type == OpCreate, op.Type == OpPut && op.ResourceVersion == 0:
			return Event{Type: Added, Record: Record{Kind: op.Kind, Name: op.Name, Value: op.Value, ResourceVersion: rev}}, nil
		default:
			// An update, a delete, or a put conditional on a version the writer read: there is
			// nothing to change.
			return fail(ErrNotFound)
		}
	}
	if op.Type == OpCreate {
		return fail(ErrExists)
	}
	if op.ResourceVersion != 0 && op.ResourceVersion != cur.ResourceVersion {
		return fail(fmt.Errorf("read at version %d, stored version is %d: %w", op.ResourceVersion, cur.ResourceVersion, ErrConflict))
	}
	if op.Type == OpDelete {
		return Event{Type: Deleted, Record: Record{Kind: op.Kind, Name: op.Name, Value: cur.Value, ResourceVersion: rev}}, nil
	}
	return Event{Type: Modified, Record: Record{Kind: op.Kind, Name: op.Name, Value: op.Value, ResourceVersion: rev}}, nil
}

// ApplyAll works out a whole Txn: Apply for each op in order, each op seeing the writes of the
// earlier ones. stored returns a key's record before the Txn (nil if none) and rev the revision op
// i takes. It returns one event per op, or the first failing op's error.
func ApplyAll(ops []Op, stored func(kind, name string) *Record, rev func(i int) int64) ([]Event, error) {
	type key struct{ kind, name string }
	scratch := map[key]*Record{}
	events := make([]Event, 0, len(ops))
	for i, op := range ops {
		k := key{op.Kind, op.Name}
		cur, seen := scratch[k]
		if !seen {
			cur = stored(op.Kind, op.Name)
		}
		e, err := Apply(op, cur, rev(i))
		if err != nil {
			return nil, err
		}
		if e.Type == Deleted {
			scratch[k] = nil
		} else {
			scratch[k] = &e.Record
		}
		events = append(events, e)
	}
	return events, nil
}

// IsOpError reports whether err is one of the outcomes Apply decides (ErrExists, ErrNotFound,
// ErrConflict), as opposed to a failure of the store itself.
func IsOpError(err error) bool {
	return errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict)
}
