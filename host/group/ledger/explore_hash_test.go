package ledger

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"strings"
	"time"
)

// stateHasher hashes a world's whole state (the store's keys and leases,
// each rank's ledger, open write and undelivered watch events, and the
// ground truth) so the explorer can skip states it has seen; adapted from
// core's (core/explore_hash_test.go). Two states that differ only in the
// numbering of etcd revisions or leases hash alike, so that inputs that
// commute (two ranks writing in either order) reach one state: revisions
// are renumbered in their order (the ledger and the store only compare
// them, and a new one is above all), leases in the order the walk meets
// them (only ever compared for equality). The history of the store's
// events, log records and the last resolve's answer carry no state; the
// events a rank's watch has yet to deliver are hashed instead of its place
// in the history. Continuations (the done funcs of a Flush's deletions)
// cannot be read; the deletions' operations are hashed instead.
type stateHasher struct {
	buf    []byte           // what the walk wrote, hashed at its end
	revs   map[int64]uint64 // revision -> its rank among them (0 stays 0)
	leases map[int64]uint64
	seen   map[uintptr]uint64 // pointers already walked, by first-visit order
}

var hashSeed = maphash.MakeSeed()

// fieldKind marks the fields that hold a revision or a lease.
type fieldKind uint8

const (
	plainField fieldKind = iota
	revField
	leaseField
	skipField
)

var fieldKinds = map[reflect.Type]map[string]fieldKind{
	reflect.TypeFor[store]():       {"rev": revField, "log": skipField, "lease": skipField, "leases": skipField},
	reflect.TypeFor[storeKV]():     {"create": revField, "mod": revField, "lease": leaseField},
	reflect.TypeFor[Event]():       {"Rev": revField},
	reflect.TypeFor[view]():        {"rev": revField},
	reflect.TypeFor[LostRank]():    {"Revision": revField},
	reflect.TypeFor[Ledger]():      {"keys": skipField, "log": skipField, "lease": leaseField},
	reflect.TypeFor[srank]():       {"lease": leaseField, "seen": skipField, "logs": skipField, "outs": skipField, "err": skipField},
	reflect.TypeFor[rig]():         {"t": skipField, "keys": skipField},
	reflect.TypeFor[world]():       {"cfg": skipField, "g": skipField, "logged": skipField, "violation": skipField, "drained": skipField},
	reflect.TypeFor[Flush]():       {"l": skipField},
	reflect.TypeFor[deletion]():    {"done": skipField},
	reflect.TypeFor[memberEntry](): {"err": skipField}, // follows from rec, which is hashed
	reflect.TypeFor[time.Time]():   {"loc": skipField},
}

// structKinds is the kind of each field of struct type t.
func structKinds(t reflect.Type) []fieldKind { return typeInfo(t).kinds }

func (w *world) hash() uint64 {
	s := &stateHasher{revs: map[int64]uint64{}, leases: map[int64]uint64{0: 0}}
	revs := w.revisions()
	for i, r := range revs {
		s.revs[r] = uint64(i)
	}
	s.buf = make([]byte, 0, 4096)
	w.walkState(s)
	return maphash.Bytes(hashSeed, s.buf)
}

// revisions lists, in order, every revision the state holds (every field
// of fieldKinds marked revField), and 0.
func (w *world) revisions() []int64 {
	st := w.g.s
	revs := []int64{0, st.rev}
	for _, kv := range st.kvs {
		revs = append(revs, kv.create, kv.mod)
	}
	for _, r := range w.g.ranks {
		for _, ev := range st.log[r.seen:] {
			revs = append(revs, ev.Rev)
		}
		revs = append(revs, r.l.view.rev)
		for _, lr := range r.l.members.lost {
			revs = append(revs, lr.Revision)
		}
	}
	slices.Sort(revs)
	return slices.Compact(revs)
}

// walkState walks what w's future depends on, in a fixed order.
func (w *world) walkState(s *stateHasher) {
	s.seen = map[uintptr]uint64{}
	for _, r := range w.g.ranks {
		s.walk(reflect.ValueOf(r).Elem())
		// What its watch has yet to deliver, not where it stands.
		for _, ev := range w.g.s.log[r.seen:] {
			if strings.HasPrefix(ev.Key, w.g.keys.Base) {
				s.walk(reflect.ValueOf(ev))
			}
		}
		s.u64(1 << 61)
	}
	s.walk(reflect.ValueOf(w.g.s).Elem())
	live := make([]int64, 0, len(w.g.s.leases))
	for l := range w.g.s.leases {
		live = append(live, l)
	}
	slices.Sort(live)
	for _, l := range live {
		s.lease(l)
	}
	s.walk(reflect.ValueOf(w).Elem())
}

func (s *stateHasher) u64(x uint64) { s.buf = binary.LittleEndian.AppendUint64(s.buf, x) }

func (s *stateHasher) str(x string) {
	s.u64(uint64(len(x)))
	s.buf = append(s.buf, x...)
}

func (s *stateHasher) rev(r int64) {
	n, ok := s.revs[r]
	if !ok {
		panic(fmt.Sprintf("stateHasher: revision %d not among the state's (revisions)", r))
	}
	s.u64(n)
}

func (s *stateHasher) lease(l int64) {
	n, ok := s.leases[l]
	if !ok {
		n = uint64(len(s.leases))
		s.leases[l] = n
	}
	s.u64(n)
}

func (s *stateHasher) walk(v reflect.Value) {
	t := v.Type()
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
		s.str(v.String())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			s.u64(0)
			return
		}
		if t.Elem().Kind() == reflect.Uint8 {
			s.str(string(v.Bytes()))
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
		s.str(v.Elem().Type().String())
		s.walk(v.Elem())
	case reflect.Struct:
		kinds := structKinds(t)
		for i := range v.NumField() {
			switch kinds[i] {
			case skipField:
			case revField:
				s.rev(v.Field(i).Int())
			case leaseField:
				s.lease(v.Field(i).Int())
			default:
				s.walk(v.Field(i))
			}
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
	}
	panic(fmt.Sprintf("stateHasher: map key kind %v", a.Kind()))
}
