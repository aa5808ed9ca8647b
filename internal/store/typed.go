package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"herd.dev/herd/api/v1alpha1"
)

// Resource names: the store kinds herd's objects are kept under.
const (
	Fleets    = "fleets"
	Instances = "instances"
	Events    = "events"
	// Claims are the listener ports and hostnames fleets hold, one record each, written with the
	// fleets so that concurrent applies cannot both take one (see apiserver's claims.go).
	Claims = "claims"
)

// Object is an API object whose metadata the typed helpers can reach.
type Object interface {
	GetMeta() *v1alpha1.ObjectMeta
}

// ptrObject is a pointer to T that is an Object, so helpers can allocate a T and use it.
type ptrObject[T any] interface {
	*T
	Object
}

// Encode marshals an object for storage. The resource version is the store's business: it is set
// from the record on decode, never trusted from the stored bytes.
func Encode(obj Object) ([]byte, error) {
	m := obj.GetMeta()
	rv := m.ResourceVersion
	m.ResourceVersion = 0
	data, err := json.Marshal(obj)
	m.ResourceVersion = rv
	return data, err
}

// DecodeRecord unmarshals a record into a new object and sets its resource version.
func DecodeRecord[T any, P ptrObject[T]](rec Record) (P, error) {
	var obj P = new(T)
	if err := json.Unmarshal(rec.Value, obj); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", rec.Kind, rec.Name, err)
	}
	obj.GetMeta().ResourceVersion = rec.ResourceVersion
	return obj, nil
}

// GetObject reads and decodes one object.
func GetObject[T any, P ptrObject[T]](ctx context.Context, s Store, kind, name string) (P, error) {
	rec, err := s.Get(ctx, kind, name)
	if err != nil {
		return nil, err
	}
	return DecodeRecord[T, P](rec)
}

// ListObjects reads and decodes every object of a kind, and returns the store revision.
func ListObjects[T any, P ptrObject[T]](ctx context.Context, s Store, kind string) ([]P, int64, error) {
	recs, rev, err := s.List(ctx, kind)
	if err != nil {
		return nil, 0, err
	}
	out := make([]P, 0, len(recs))
	for _, r := range recs {
		obj, err := DecodeRecord[T, P](r)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, obj)
	}
	return out, rev, nil
}

// PutOp returns an op that writes obj: Create when it has no resource version, otherwise an Update
// conditional on that version.
func PutOp(kind string, obj Object) (Op, error) {
	data, err := Encode(obj)
	if err != nil {
		return Op{}, err
	}
	m := obj.GetMeta()
	if m.ResourceVersion == 0 {
		return Op{Type: OpCreate, Kind: kind, Name: m.Name, Value: data}, nil
	}
	return Op{Type: OpUpdate, Kind: kind, Name: m.Name, Value: data, ResourceVersion: m.ResourceVersion}, nil
}

// PutObject writes obj (PutOp: created when it has no resource version, else updated conditional
// on it) and sets its new resource version.
func PutObject(ctx context.Context, s Store, kind string, obj Object) error {
	op, err := PutOp(kind, obj)
	if err != nil {
		return err
	}
	recs, err := s.Txn(ctx, op)
	if err != nil {
		return err
	}
	obj.GetMeta().ResourceVersion = recs[0].ResourceVersion
	return nil
}

// updateAttempts bounds how often UpdateObject reads again after a conflicting write.
const updateAttempts = 6

// UpdateObject reads an object, lets change modify it and writes it back conditional on the
// version it read, reading and changing it again when another writer got in between (a few times,
// then the ErrConflict is returned). change reports false when there is nothing to write, and an
// error from it ends the update unwritten. It returns the object as last changed, with its new
// resource version when it was written.
func UpdateObject[T any, P ptrObject[T]](ctx context.Context, s Store, kind, name string, change func(P) (bool, error)) (P, error) {
	for attempt := 1; ; attempt++ {
		obj, err := GetObject[T, P](ctx, s, kind, name)
		if err != nil {
			return nil, err
		}
		changed, err := change(obj)
		if err != nil || !changed {
			return obj, err
		}
		op, err := PutOp(kind, obj)
		if err != nil {
			return nil, err
		}
		recs, err := s.Txn(ctx, op)
		if errors.Is(err, ErrConflict) && attempt < updateAttempts {
			continue
		}
		if err != nil {
			return obj, err
		}
		obj.GetMeta().ResourceVersion = recs[0].ResourceVersion
		return obj, nil
	}
}
