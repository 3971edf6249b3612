package core

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"unsafe"

	"github.com/custody-dev/custody/sdk"
)

// stateHasher hashes a world's whole state (the Core's every field, the
// doubles, the outstanding Work and the ground truth) so the explorer can
// skip states it has seen. Two states that differ only in the numbering of
// ids (Work, handles, dlists, peers, regions: each renumbered in the order
// the walk meets it) or in scratch fields hash alike, so that inputs that
// commute reach one state. Continuations (func fields) cannot be read;
// the outstanding Work they belong to is hashed instead.
type stateHasher struct {
	h    maphash.Hash
	ids  map[reflect.Type]map[uint64]uint64
	seen map[uintptr]uint64 // pointers already walked, by first-visit order
}

var hashSeed = maphash.MakeSeed()

var idTypes = map[reflect.Type]bool{
	reflect.TypeFor[WorkID]():       true,
	reflect.TypeFor[sdk.HandleID](): true,
	reflect.TypeFor[sdk.DlistID]():  true,
	reflect.TypeFor[sdk.PeerID]():   true,
	reflect.TypeFor[sdk.RegionID](): true,
}

// skipFields are fields that carry no state: id counters, scratch buffers,
// call logs, the history of reports (each request's reported flag is kept).
var skipFields = map[reflect.Type]map[string]bool{
	reflect.TypeFor[Core]():   {"nextWork": true, "inBuf": true, "xBuf": true, "out": true},
	reflect.TypeFor[double](): {"next": true, "calls": true, "faults": true, "sent": true, "carried": true, "rides": true, "desc": true},
	reflect.TypeFor[world]():  {"cfg": true, "log": true, "violation": true, "c": true, "ds": true, "quiet": true},
}

func (w *world) hash() uint64 {
	s := &stateHasher{ids: map[reflect.Type]map[uint64]uint64{}, seen: map[uintptr]uint64{}}
	s.h.SetSeed(hashSeed)
	s.walk(reflect.ValueOf(w.c).Elem())
	for e := Epoch(1); e <= w.epoch; e++ {
		s.walk(reflect.ValueOf(e))
		if d := w.ds[e]; d != nil && !w.dead[e] {
			s.walk(reflect.ValueOf(d).Elem())
		}
	}
	s.walk(reflect.ValueOf(w).Elem())
	return s.h.Sum64()
}

func (s *stateHasher) u64(x uint64) {
	var b [8]byte
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
	s.h.Write(b[:])
}

func (s *stateHasher) walk(v reflect.Value) {
	t := v.Type()
	if idTypes[t] {
		m := s.ids[t]
		if m == nil {
			m = map[uint64]uint64{0: 0}
			s.ids[t] = m
		}
		n, ok := m[v.Uint()]
		if !ok {
			n = uint64(len(m))
			m[v.Uint()] = n
		}
		s.u64(n)
		return
	}
	switch t {
	case reflect.TypeFor[reqIndex]():
		ix := (*reqIndex)(unsafe.Pointer(v.UnsafeAddr()))
		var rs []*request
		for r := range ix.all() {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(a, b *request) int { return cmp.Compare(a.id, b.id) })
		s.u64(uint64(len(rs)))
		for _, r := range rs {
			s.walk(reflect.ValueOf(r))
		}
		return
	case reflect.TypeFor[handleIndex]():
		ix := (*handleIndex)(unsafe.Pointer(v.UnsafeAddr()))
		var xs []*xfer
		for x := range ix.all() {
			xs = append(xs, x)
		}
		s.u64(uint64(len(xs)))
		for _, x := range xs {
			s.walk(reflect.ValueOf(x))
		}
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			s.u64(1)
		} else {
			s.u64(0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s.u64(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		s.u64(v.Uint())
	case reflect.String:
		s.u64(uint64(v.Len()))
		s.h.WriteString(v.String())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			s.u64(0)
			return
		}
		s.u64(uint64(v.Len()) + 1)
		for i := range v.Len() {
			s.walk(v.Index(i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, compareKeys)
		s.u64(uint64(len(keys)))
		for _, k := range keys {
			s.walk(k)
			s.walk(v.MapIndex(k))
		}
	case reflect.Pointer:
		if v.IsNil() {
			s.u64(0)
			return
		}
		if n, ok := s.seen[v.Pointer()]; ok {
			s.u64(n)
			return
		}
		s.seen[v.Pointer()] = uint64(len(s.seen)) + 1
		s.u64(1 << 62)
		s.walk(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			s.u64(0)
			return
		}
		s.h.WriteString(v.Elem().Type().String())
		s.walk(v.Elem())
	case reflect.Struct:
		skip := skipFields[t]
		for i := range v.NumField() {
			if skip[t.Field(i).Name] {
				continue
			}
			s.walk(v.Field(i))
		}
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		// Unreadable; see stateHasher.
	default:
		panic(fmt.Sprintf("stateHasher: kind %v", v.Kind()))
	}
}

// compareKeys orders map keys by value, so a map's walk does not follow
// Go's random order.
func compareKeys(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.String:
		return cmp.Compare(a.String(), b.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return cmp.Compare(a.Uint(), b.Uint())
	case reflect.Bool:
		return cmp.Compare(fmt.Sprint(a.Bool()), fmt.Sprint(b.Bool()))
	case reflect.Struct:
		for i := range a.NumField() {
			if c := compareKeys(a.Field(i), b.Field(i)); c != 0 {
				return c
			}
		}
		return 0
	}
	panic(fmt.Sprintf("stateHasher: map key kind %v", a.Kind()))
}
