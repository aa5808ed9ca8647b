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
// an unknown type, a create that names a resource version. Implementations call it before they
// touch anything.
func CheckOps(ops []Op) error {
	for i, op := range ops {
		var problem string
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
		}
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

// IsOpError reports whether err is one of the outcomes Apply decides (ErrExists, ErrNotFound,
// ErrConflict), as opposed to a failure of the store itself.
func IsOpError(err error) bool {
	return errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict)
}
