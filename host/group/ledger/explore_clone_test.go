package ledger

import (
	"fmt"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/custody-dev/custody/core"
)

// clone is a deep copy of w, so that the explorer steps each input from
// a copy of the state it leaves instead of replaying the path to it. It
// copies every field, unexported ones included, keeping pointer identity
// and cycles (a request's record and the record's requests); errors,
// locations and the test are shared (nothing changes them). The only
// continuations in a world are the done funcs of an open write's
// deletions (Flush.dels): they cannot be copied, so the copy's are made
// again from each deletion's operation, as Flush made them.
func (w *world) clone() *world {
	drained := w.drained // the explorer's, shared
	w.drained = nil
	defer func() { w.drained = drained }()
	c := &cloner{ptrs: map[ptrKey]reflect.Value{}}
	src := reflect.ValueOf(w)
	dst := reflect.New(src.Type().Elem())
	c.ptrs[ptrKey{src.Pointer(), src.Type()}] = dst
	c.copy(dst.Elem(), src.Elem())
	out := dst.Interface().(*world)
	out.drained = drained
	for _, r := range out.g.ranks {
		if r.plan != nil {
			rebuildDeletions(r.plan)
		}
	}
	return out
}

type ptrKey struct {
	p uintptr
	t reflect.Type
}

type cloner struct{ ptrs map[ptrKey]reflect.Value }

var (
	errorType = reflect.TypeFor[error]()
	// shared are the types whose values are never changed once made (a
	// new one replaces an old one): a copy shares them.
	shared = map[reflect.Type]bool{
		reflect.TypeFor[*testing.T]():     true,
		reflect.TypeFor[*time.Location](): true,
		reflect.TypeFor[Mode]():           true,
		reflect.TypeFor[Outcome]():        true,
		reflect.TypeFor[exploreConfig]():  true,
	}
	// types holds the facts of every type met so far (typeInfo): read
	// without a lock, replaced whole under typesMu when a type is new.
	types   atomic.Pointer[map[reflect.Type]*typeFacts]
	typesMu sync.Mutex
)

// typeFacts is what the clone and the hash need of a type, worked out
// once per type.
type typeFacts struct {
	flat bool
	// deep: the fields of a struct that a shallow copy does not copy
	// well (holding pointers, maps, slices or interfaces); kinds: how the
	// hash reads each field.
	deep  []int
	kinds []fieldKind
}

// typeInfo is the facts of t.
func typeInfo(t reflect.Type) *typeFacts {
	if m := types.Load(); m != nil {
		if f := (*m)[t]; f != nil {
			return f
		}
	}
	typesMu.Lock()
	defer typesMu.Unlock()
	next := map[reflect.Type]*typeFacts{}
	if m := types.Load(); m != nil {
		maps.Copy(next, *m)
	}
	learnType(next, t)
	types.Store(&next)
	return next[t]
}

// learnType records in m the facts of t and of every type it holds.
func learnType(m map[reflect.Type]*typeFacts, t reflect.Type) {
	if m[t] != nil {
		return
	}
	f := &typeFacts{flat: flat(t)}
	m[t] = f
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		learnType(m, t.Elem())
	case reflect.Map:
		learnType(m, t.Key())
		learnType(m, t.Elem())
	case reflect.Struct:
		f.kinds = make([]fieldKind, t.NumField())
		for i := range t.NumField() {
			ft := t.Field(i).Type
			f.kinds[i] = fieldKinds[t][t.Field(i).Name]
			if !shared[ft] && !flat(ft) {
				f.deep = append(f.deep, i)
			}
			learnType(m, ft)
		}
	}
}

// deepFields lists the fields of struct type t that a shallow copy does
// not copy well.
func deepFields(t reflect.Type) []int { return typeInfo(t).deep }

// open makes a field readable and settable whatever its export.
func open(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// copy copies src into dst (settable), deeply.
func (c *cloner) copy(dst, src reflect.Value) {
	t := src.Type()
	if shared[t] {
		dst.Set(src)
		return
	}
	if src.Kind() == reflect.Struct && !src.CanAddr() {
		// A map's value or an interface's: copy it somewhere addressable.
		tmp := reflect.New(t).Elem()
		tmp.Set(src)
		src = tmp
	}
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		k := ptrKey{src.Pointer(), t}
		if n, ok := c.ptrs[k]; ok {
			dst.Set(n)
			return
		}
		n := reflect.New(t.Elem())
		c.ptrs[k] = n
		c.copy(n.Elem(), src.Elem())
		dst.Set(n)
	case reflect.Struct:
		dst.Set(src)
		for _, i := range deepFields(t) {
			c.copy(open(dst.Field(i)), open(src.Field(i)))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		n := reflect.MakeSlice(t, src.Len(), src.Len())
		if typeInfo(t.Elem()).flat {
			reflect.Copy(n, src)
		} else {
			for i := range src.Len() {
				c.copy(n.Index(i), src.Index(i))
			}
		}
		dst.Set(n)
	case reflect.Array:
		for i := range src.Len() {
			c.copy(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		if src.IsNil() {
			return
		}
		if m, ok := cloneFlatMap(src.Interface()); ok {
			dst.Set(reflect.ValueOf(m))
			return
		}
		n := reflect.MakeMapWithSize(t, src.Len())
		flatV := typeInfo(t.Elem()).flat
		it := src.MapRange()
		for it.Next() {
			if flatV {
				n.SetMapIndex(it.Key(), it.Value())
				continue
			}
			v := reflect.New(t.Elem()).Elem()
			c.copy(v, it.Value())
			n.SetMapIndex(it.Key(), v)
		}
		dst.Set(n)
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		e := src.Elem()
		if e.Type().Implements(errorType) {
			dst.Set(src) // errors are never changed
			return
		}
		v := reflect.New(e.Type()).Elem()
		c.copy(v, e)
		dst.Set(v)
	case reflect.Func:
		if !src.IsNil() && t != reflect.TypeFor[func()]() {
			panic(fmt.Sprintf("clone: func %v", t))
		}
		// A deletion's done: made again by rebuildDeletions.
		dst.Set(reflect.Zero(t))
	case reflect.Chan, reflect.UnsafePointer:
		panic(fmt.Sprintf("clone: kind %v", src.Kind()))
	default:
		dst.Set(src)
	}
}

// cloneFlatMap copies the maps of a world whose keys and values need no
// deep copy, without reflection (the most of what a clone copies).
func cloneFlatMap(m any) (any, bool) {
	switch m := m.(type) {
	case map[core.RequestID]struct{}:
		return maps.Clone(m), true
	case map[string]struct{}:
		return maps.Clone(m), true
	case map[uint64]struct{}:
		return maps.Clone(m), true
	case map[core.RequestID]bool:
		return maps.Clone(m), true
	case map[string]bool:
		return maps.Clone(m), true
	case map[int64]bool:
		return maps.Clone(m), true
	case map[string]int:
		return maps.Clone(m), true
	case map[core.RequestID]State:
		return maps.Clone(m), true
	case map[string]State:
		return maps.Clone(m), true
	case map[string]PoisonRecord:
		return maps.Clone(m), true
	}
	return nil, false
}

// flat says whether a value of t holds nothing that needs a deep copy
// (strings and byte slices are never changed in place).
func flat(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return false
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Array:
		return flat(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !flat(t.Field(i).Type) {
				return false
			}
		}
	}
	return true
}

// rebuildDeletions makes again the done funcs of f's deletions, as Flush
// made them: the deletion of a states record of this member's book
// forgets the record, the one of a collected key forgets the collection,
// and the deletion of a request's expiries (the only one by prefix) moves
// the request on.
func rebuildDeletions(f *Flush) {
	b, keys := &f.l.book, f.l.keys
	for i := range f.dels {
		d := &f.dels[i]
		key := d.op.Key
		_, own := b.records[key]
		_, col := b.collect[key]
		switch {
		case d.op.Prefix:
			id, _, err := keys.parseRequestID(key)
			r := b.reqs[id]
			if err != nil || r == nil {
				panic(fmt.Sprintf("clone: deletion of %s names no request in the book", key))
			}
			d.done = func() { r.phase = r.phase.expiriesDeleted() }
		case own && col:
			panic("clone: deletion of " + key + " is of both a record and a collected key")
		case own:
			d.done = func() { delete(b.records, key) }
		case col:
			d.done = func() { delete(b.collect, key) }
		default:
			// What is left of a write is still to do: a copy is never made
			// between a transaction and its answer (txn is one step).
			panic("clone: deletion of " + key + " names nothing in the book")
		}
	}
}
