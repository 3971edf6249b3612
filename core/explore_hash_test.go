package core

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math/bits"
	"reflect"
	"slices"
	"sync"
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
//
// The walk is compiled once per type (hashPlan): a function that reads a
// value of that type in place, so that a hash, taken after every input,
// costs no reflection over field names and no copies.
type stateHasher struct {
	h    uint64
	ids  [idKinds]map[uint64]uint64
	seen map[uintptr]uint64 // pointers already walked, by first-visit order
	maps map[reflect.Type]*mapScratch
}

// mapScratch holds a map's entries while its walk sorts them, reused by
// the next walk of a map of its type (busy while one is under way: a
// map's values may hold a map of the same type).
type mapScratch struct {
	keys, vals reflect.Value
	order      []int
	busy       bool
}

// hashFn hashes the value of its plan's type at p.
type hashFn func(s *stateHasher, p unsafe.Pointer)

var hashSeed = maphash.MakeSeed()

// idTypes are the ids renumbered in walk order, each its own numbering.
var idTypes = map[reflect.Type]int{
	reflect.TypeFor[WorkID]():       0,
	reflect.TypeFor[sdk.HandleID](): 1,
	reflect.TypeFor[sdk.DlistID]():  2,
	reflect.TypeFor[sdk.PeerID]():   3,
	reflect.TypeFor[sdk.RegionID](): 4,
}

const idKinds = 5

// skipFields are fields that carry no state: id counters, scratch buffers,
// call logs, the history of reports (each request's reported flag is kept).
var skipFields = map[reflect.Type]map[string]bool{
	reflect.TypeFor[Core]():   {"nextWork": true, "inBuf": true, "xBuf": true, "out": true},
	reflect.TypeFor[double](): {"next": true, "calls": true, "faults": true, "sent": true, "carried": true, "rides": true, "desc": true},
	reflect.TypeFor[world]():  {"cfg": true, "log": true, "violation": true, "c": true, "ds": true, "quiet": true},
}

var hashers = sync.Pool{New: func() any {
	s := &stateHasher{seen: map[uintptr]uint64{}, maps: map[reflect.Type]*mapScratch{}}
	for i := range s.ids {
		s.ids[i] = map[uint64]uint64{}
	}
	return s
}}

func (w *world) hash() uint64 {
	s := hashers.Get().(*stateHasher)
	defer hashers.Put(s)
	s.h = 0x27D4EB2F165667C5
	for i := range s.ids {
		clear(s.ids[i])
	}
	clear(s.seen)
	coreHash()(s, unsafe.Pointer(w.c))
	for e := Epoch(1); e <= w.epoch; e++ {
		s.u64(uint64(e))
		if d := w.ds[e]; d != nil && !w.dead[e] {
			doubleHash()(s, unsafe.Pointer(d))
		}
	}
	worldHash()(s, unsafe.Pointer(w))
	return fmix(s.h)
}

// u64 mixes x into the hash (a round of xxhash64; the state starts
// non-zero, so that a zero mixed in changes it too).
func (s *stateHasher) u64(x uint64) {
	s.h = bits.RotateLeft64(s.h+x*0xC2B2AE3D27D4EB4F, 31) * 0x9E3779B185EBCA87
}

// fmix is murmur3's finaliser: every bit of the state reaches every bit of
// the hash.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

var plans = map[reflect.Type]*hashFn{}

var plansMu sync.Mutex

// The plans of the three roots of a world's walk.
var (
	coreHash   = sync.OnceValue(func() hashFn { return hashPlan(reflect.TypeFor[Core]()) })
	doubleHash = sync.OnceValue(func() hashFn { return hashPlan(reflect.TypeFor[double]()) })
	worldHash  = sync.OnceValue(func() hashFn { return hashPlan(reflect.TypeFor[world]()) })
)

// hashPlan compiles (once) the walk of values of type t.
func hashPlan(t reflect.Type) hashFn {
	plansMu.Lock()
	defer plansMu.Unlock()
	return plan(t)
}

// plan is hashPlan under plansMu. A recursive type reaches its own plan
// through the cell it was entered under, filled once it is compiled.
func plan(t reflect.Type) hashFn {
	if f, ok := plans[t]; ok {
		if *f != nil {
			return *f
		}
		return func(s *stateHasher, p unsafe.Pointer) { (*f)(s, p) }
	}
	cell := new(hashFn)
	plans[t] = cell
	*cell = compile(t)
	return *cell
}

func compile(t reflect.Type) hashFn {
	if k, ok := idTypes[t]; ok {
		return func(s *stateHasher, p unsafe.Pointer) {
			v := *(*uint64)(p)
			m := s.ids[k]
			n, ok := m[v]
			if !ok && v != 0 {
				n = uint64(len(m)) + 1
				m[v] = n
			}
			s.u64(n)
		}
	}
	switch t {
	case reflect.TypeFor[reqIndex]():
		req := plan(reflect.TypeFor[*request]())
		return func(s *stateHasher, p unsafe.Pointer) {
			var rs []*request
			for r := range (*reqIndex)(p).all() {
				rs = append(rs, r)
			}
			slices.SortFunc(rs, func(a, b *request) int { return cmp.Compare(a.id, b.id) })
			s.u64(uint64(len(rs)))
			for i := range rs {
				req(s, unsafe.Pointer(&rs[i]))
			}
		}
	case reflect.TypeFor[handleIndex]():
		xfer := plan(reflect.TypeFor[*xfer]())
		return func(s *stateHasher, p unsafe.Pointer) {
			ix := (*handleIndex)(p)
			s.u64(uint64(ix.len()))
			for x := range ix.all() {
				xfer(s, unsafe.Pointer(&x))
			}
		}
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(s *stateHasher, p unsafe.Pointer) {
			if *(*bool)(p) {
				s.u64(1)
			} else {
				s.u64(0)
			}
		}
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return func(s *stateHasher, p unsafe.Pointer) { s.u64(*(*uint64)(p)) }
	case reflect.Int32:
		return func(s *stateHasher, p unsafe.Pointer) { s.u64(uint64(*(*int32)(p))) }
	case reflect.Uint32:
		return func(s *stateHasher, p unsafe.Pointer) { s.u64(uint64(*(*uint32)(p))) }
	case reflect.Int16, reflect.Uint16:
		return func(s *stateHasher, p unsafe.Pointer) { s.u64(uint64(*(*uint16)(p))) }
	case reflect.Int8, reflect.Uint8:
		return func(s *stateHasher, p unsafe.Pointer) { s.u64(uint64(*(*uint8)(p))) }
	case reflect.String:
		return func(s *stateHasher, p unsafe.Pointer) {
			str := *(*string)(p)
			s.u64(uint64(len(str)))
			s.u64(maphash.String(hashSeed, str))
		}
	case reflect.Slice:
		elem, size := plan(t.Elem()), t.Elem().Size()
		return func(s *stateHasher, p unsafe.Pointer) {
			h := (*sliceHeader)(p)
			if h.data == nil {
				s.u64(0)
				return
			}
			s.u64(uint64(h.len) + 1)
			for i := range h.len {
				elem(s, unsafe.Add(h.data, uintptr(i)*size))
			}
		}
	case reflect.Array:
		elem, size, n := plan(t.Elem()), t.Elem().Size(), t.Len()
		return func(s *stateHasher, p unsafe.Pointer) {
			s.u64(uint64(n) + 1)
			for i := range n {
				elem(s, unsafe.Add(p, uintptr(i)*size))
			}
		}
	case reflect.Map:
		return compileMap(t)
	case reflect.Pointer:
		elem := plan(t.Elem())
		return func(s *stateHasher, p unsafe.Pointer) {
			q := *(*unsafe.Pointer)(p)
			if q == nil {
				s.u64(0)
				return
			}
			if n, ok := s.seen[uintptr(q)]; ok {
				s.u64(n)
				return
			}
			s.seen[uintptr(q)] = uint64(len(s.seen)) + 1
			s.u64(1 << 62)
			elem(s, q)
		}
	case reflect.Interface:
		return func(s *stateHasher, p unsafe.Pointer) {
			v := reflect.NewAt(t, p).Elem()
			if v.IsNil() {
				s.u64(0)
				return
			}
			e := v.Elem()
			s.u64(maphash.String(hashSeed, e.Type().String()))
			c := reflect.New(e.Type())
			c.Elem().Set(e)
			hashPlan(e.Type())(s, c.UnsafePointer())
		}
	case reflect.Struct:
		type field struct {
			off uintptr
			f   hashFn
		}
		var fs []field
		skip := skipFields[t]
		for i := range t.NumField() {
			if sf := t.Field(i); !skip[sf.Name] {
				fs = append(fs, field{sf.Offset, plan(sf.Type)})
			}
		}
		return func(s *stateHasher, p unsafe.Pointer) {
			for _, f := range fs {
				f.f(s, unsafe.Add(p, f.off))
			}
		}
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		// Unreadable; see stateHasher.
		return func(*stateHasher, unsafe.Pointer) {}
	}
	panic(fmt.Sprintf("stateHasher: kind %v", t.Kind()))
}

type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// compileMap walks a map's entries in the order of their keys, so that
// the walk does not follow Go's random order.
func compileMap(t reflect.Type) hashFn {
	key, val := plan(t.Key()), plan(t.Elem())
	ks, vs := reflect.SliceOf(t.Key()), reflect.SliceOf(t.Elem())
	less := keyCompare(t.Key())
	return func(s *stateHasher, p unsafe.Pointer) {
		m := reflect.NewAt(t, p).Elem()
		n := m.Len()
		s.u64(uint64(n))
		if n == 0 {
			return
		}
		sc := s.maps[t]
		switch {
		case sc == nil || sc.busy:
			sc = &mapScratch{}
			if s.maps[t] == nil {
				s.maps[t] = sc
			}
			fallthrough
		case sc.keys.Len() < n:
			sc.keys, sc.vals = reflect.MakeSlice(ks, n, 2*n), reflect.MakeSlice(vs, n, 2*n)
		}
		sc.busy = true
		defer func() { sc.busy = false }()
		order := sc.order[:0]
		for it := m.MapRange(); it.Next(); {
			i := len(order)
			sc.keys.Index(i).SetIterKey(it)
			sc.vals.Index(i).SetIterValue(it)
			order = append(order, i)
		}
		sc.order = order
		kp, kz := sc.keys.UnsafePointer(), t.Key().Size()
		vp, vz := sc.vals.UnsafePointer(), t.Elem().Size()
		slices.SortFunc(order, func(a, b int) int {
			return less(unsafe.Add(kp, uintptr(a)*kz), unsafe.Add(kp, uintptr(b)*kz))
		})
		for _, i := range order {
			key(s, unsafe.Add(kp, uintptr(i)*kz))
			val(s, unsafe.Add(vp, uintptr(i)*vz))
		}
	}
}

// keyCompare orders map keys of type t by value.
func keyCompare(t reflect.Type) func(a, b unsafe.Pointer) int {
	switch t.Kind() {
	case reflect.String:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*string)(a), *(*string)(b)) }
	case reflect.Int, reflect.Int64:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*int64)(a), *(*int64)(b)) }
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*uint64)(a), *(*uint64)(b)) }
	case reflect.Int32:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*int32)(a), *(*int32)(b)) }
	case reflect.Uint32:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*uint32)(a), *(*uint32)(b)) }
	case reflect.Int16:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*int16)(a), *(*int16)(b)) }
	case reflect.Uint16:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*uint16)(a), *(*uint16)(b)) }
	case reflect.Int8:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*int8)(a), *(*int8)(b)) }
	case reflect.Bool, reflect.Uint8:
		return func(a, b unsafe.Pointer) int { return cmp.Compare(*(*uint8)(a), *(*uint8)(b)) }
	case reflect.Struct:
		type field struct {
			off uintptr
			f   func(a, b unsafe.Pointer) int
		}
		var fs []field
		for i := range t.NumField() {
			sf := t.Field(i)
			fs = append(fs, field{sf.Offset, keyCompare(sf.Type)})
		}
		return func(a, b unsafe.Pointer) int {
			for _, f := range fs {
				if c := f.f(unsafe.Add(a, f.off), unsafe.Add(b, f.off)); c != 0 {
					return c
				}
			}
			return 0
		}
	}
	panic(fmt.Sprintf("stateHasher: map key kind %v", t.Kind()))
}
