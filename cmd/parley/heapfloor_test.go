package main

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestFloorGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name               string
		floor, live, roots uint64
		base, want         int
	}{
		{"small heap: the goal is the floor", 64 * mib, 3 * mib, 1 * mib, 100, 1525},
		{"before the first collection: the runtime's minimum goal is the floor", 64 * mib, 0, 0, 100, 1600},
		{"the minimum goal bounds a tiny heap too", 64 * mib, 100 << 10, 0, 100, 1600},
		{"heap near the floor: never under GOGC", 16 * mib, 12 * mib, 1 * mib, 100, 100},
		{"heap over the floor", 16 * mib, 200 * mib, 10 * mib, 100, 100},
		{"an operator's larger GOGC stays", 16 * mib, 3 * mib, 0, 800, 800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := floorGCPercent(tc.floor, tc.live, tc.roots, tc.base); got != tc.want {
				t.Errorf("floorGCPercent(%d MiB, %d, %d, %d) = %d, want %d", tc.floor/mib, tc.live, tc.roots, tc.base, got, tc.want)
			}
		})
	}
}

// TestHeapFloor runs the floor in a process of its own (this test binary
// again, running only this test): while a small live heap allocates 256
// MiB of garbage it collects about every floor bytes, not every 4 MiB, its
// heap goal never passes the floor by more than the live heap's share, and
// stopping it restores GOGC. In this process the live heap is whatever the
// package's other tests left (servers, browsers' pages, caches): above the
// floor, the floor rightly does nothing, and the goal says nothing of it.
func TestHeapFloor(t *testing.T) {
	if os.Getenv(heapFloorChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHeapFloor$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), heapFloorChild+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("the floor in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("TestHeapFloor in its own process: %v", err)
		}
		return
	}
	const floor = 64 << 20
	const garbage = 256 << 20
	base := currentGCPercent()
	if base < 0 {
		t.Skip("GOGC=off in this test's environment")
	}
	without, _ := churn(garbage)

	stop := processHeapFloor.start(floor)
	seen := floorSeen()
	with, maxGoal := churn(garbage)
	// Cleanups run on their own goroutine, after the collection.
	for i := 0; i < 500 && floorSeen() == seen; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if floorSeen() == seen {
		t.Errorf("the floor heard of none of %d collections", with)
	}
	if got := currentGCPercent(); got <= base {
		t.Errorf("GOGC %d while the floor runs, want more than %d", got, base)
	}
	stop()
	if got := currentGCPercent(); got != base {
		t.Errorf("GOGC %d after stop, want %d again", got, base)
	}
	t.Logf("collections while allocating %d MiB: %d without the floor, %d with it; largest goal %.1f MiB", garbage>>20, without, with, float64(maxGoal)/(1<<20))
	if limit := uint64(garbage/floor*2 + 2); with > limit {
		t.Errorf("%d collections with a %d MiB floor, want at most %d", with, floor>>20, limit)
	}
	if with*4 > without {
		t.Errorf("%d collections with the floor, %d without: want a quarter or fewer", with, without)
	}
	// The floor sets GOGC after each cycle from that cycle's live heap and
	// roots; a cycle whose marking is slow (a loaded machine, the race
	// detector) counts the garbage allocated meanwhile as live, and its
	// goal, made with the GOGC of the cycle before, passes the floor until
	// the next tuning by the ratio of the two cycles' live heaps (seen:
	// 144–169 MiB under load with the race detector, 64 MiB on a quiet
	// machine). Bounded: within three times the floor.
	if maxGoal > 3*floor {
		t.Errorf("heap goal reached %.1f MiB, want within three times the %d MiB floor", float64(maxGoal)/(1<<20), floor>>20)
	}
}

func floorSeen() uint64 {
	processHeapFloor.mu.Lock()
	defer processHeapFloor.mu.Unlock()
	return processHeapFloor.seen
}

// heapFloorChild marks the process TestHeapFloor starts to run the floor
// alone.
const heapFloorChild = "PARLEY_TEST_HEAP_FLOOR_CHILD"

var sink []byte

// churn allocates n bytes of short-lived garbage and returns how many
// collections ran meanwhile and the largest heap goal seen.
func churn(n int) (cycles uint64, maxGoal uint64) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/goal:bytes"}}
	runtime.GC()
	metrics.Read(s)
	start := s[0].Value.Uint64()
	for i := 0; i < n; i += 4096 {
		sink = make([]byte, 4096)
		if i%(1<<20) == 0 {
			metrics.Read(s)
			maxGoal = max(maxGoal, s[1].Value.Uint64())
		}
	}
	metrics.Read(s)
	sink = nil
	debug.FreeOSMemory()
	return s[0].Value.Uint64() - start, max(maxGoal, s[1].Value.Uint64())
}
