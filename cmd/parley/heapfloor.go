package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultHeapFloorMiB is serve's --heap-floor. A gateway's live heap under
// a send load is a few MB; with the runtime's default (GOGC=100, a 4 MB
// minimum target) it collects 12–25 times a second, and every cycle wakes
// both processors' threads — about a sixth of the server's CPU per send on
// a 2-core host (docs/benchmarks.md, "a floor under the heap"). A floor of
// 64 MiB brings that to under one cycle a second and costs an idle server at
// most that much memory; a gateway whose live heap is larger (thousands of
// sockets) runs exactly as without it.
const DefaultHeapFloorMiB = 64

// runtimeHeapMinimum is the runtime pacer's smallest heap goal at
// GOGC=100 (defaultHeapMinimum); it scales with GOGC, so past
// floor/runtimeHeapMinimum × 100 the goal of a small heap would pass the
// floor — before the first collection, when the live heap reads 0, by
// far.
const runtimeHeapMinimum = 4 << 20

// heapFloor keeps the heap goal from falling under a floor while the live
// heap is small. Go offers a ceiling (GOMEMLIMIT) but no floor, so after
// every collection it sets GOGC to the value whose goal is the floor:
// goal = live + (live + stacks + globals) × GOGC/100 (the runtime's pacer
// since Go 1.18). It never sets less than the GOGC the process started
// with, so a large heap is paced as before, and a GOMEMLIMIT still caps
// it. GOGC=off turns it off.
//
// One floor per process: several serves in one process (tests) share it;
// the last to stop restores the starting GOGC.
type heapFloor struct {
	mu    sync.Mutex
	users int
	floor uint64 // bytes, the largest asked for since the first user started
	base  int    // GOGC when the first user started
	gen   uint64 // bumped when the last user stops; a stale cycle ends
	last  int    // the GOGC last set
	seen  uint64 // collections it has heard of (tests)
}

var processHeapFloor heapFloor

// start applies a floor of floor bytes until the returned stop is called.
// floor 0 does nothing.
func (h *heapFloor) start(floor uint64) (stop func()) {
	if floor == 0 {
		return func() {}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users == 0 {
		h.gen++
		h.base = currentGCPercent()
		h.last = h.base
		h.floor = floor
		if h.base >= 0 { // GOGC=off: nothing to raise
			h.tuneLocked()
			h.arm(h.gen)
		}
	}
	h.users++
	h.floor = max(h.floor, floor)
	return h.stopFunc()
}

func (h *heapFloor) stopFunc() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.users--
			if h.users == 0 {
				h.gen++
				debug.SetGCPercent(h.base)
			}
		})
	}
}

// arm asks to hear about the next collection: a cleanup on an object
// that nothing references runs after the cycle that frees it.
func (h *heapFloor) arm(gen uint64) {
	runtime.AddCleanup(new([64]byte), h.cycle, gen)
}

func (h *heapFloor) cycle(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen { // stopped since
		return
	}
	h.seen++
	h.tuneLocked()
	h.arm(gen)
}

// currentGCPercent is GOGC as set by the environment or SetGCPercent;
// -1 when collection is off.
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int(int32(s[0].Value.Uint64()))
}

var heapFloorSamples = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

func (h *heapFloor) tuneLocked() {
	s := make([]metrics.Sample, len(heapFloorSamples))
	for i, name := range heapFloorSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	gogc := floorGCPercent(h.floor, v[0], v[1]+v[2], h.base)
	if gogc != h.last {
		debug.SetGCPercent(gogc)
		h.last = gogc
	}
}

// floorGCPercent is the GOGC whose heap goal is floor bytes, given the
// live heap and the other roots (stacks, globals) the pacer counts, never
// under base.
func floorGCPercent(floor, live, roots uint64, base int) int {
	if live >= floor {
		return base
	}
	p := floor * 100 / runtimeHeapMinimum
	if scan := live + roots; scan > 0 {
		p = min(p, (floor-live)*100/scan)
	}
	return max(base, int(p))
}
