package loadtest

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/parleychat/parley/client"
)

// stats collects the figures while the run goes. Latencies are kept whole
// (milliseconds as float64): a CI run has tens of thousands, a measurement
// run a few million, which fits.
type stats struct {
	mu         sync.Mutex
	loadStart  time.Time
	loadEnd    time.Time // zero while the load phase runs
	send       []float64 // enqueue → sent, successful sends
	recall     []float64 // enqueue → recalled
	push       map[string][]float64
	pushN      map[string]int // deliveries applied while connected, by class
	catchupN   int            // deliveries applied during a (re)connect's sync
	catch      []float64      // reconnect → synced
	committed  int            // successful sends whose outcome came during the load phase
	committedT []int          // per second of the load phase
	codes      map[string]int
	enqueued   int
	recalls    int
	reads      int
	readErrs   int
	reconnects int
	churn      int
	kills      int
}

func newStats() *stats {
	return &stats{push: map[string][]float64{}, pushN: map[string]int{}, codes: map[string]int{}}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *stats) outcome(it client.Item, start time.Time, known bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	code := string(it.Code)
	if code == "" {
		code = "ok"
		if it.Dup {
			code = "ok_dup"
		}
	}
	s.codes[string(it.Kind)+":"+code]++
	if it.Code != "" || !known {
		return
	}
	if it.Kind == client.KindRecall {
		s.recall = append(s.recall, ms(now.Sub(start)))
		return
	}
	s.send = append(s.send, ms(now.Sub(start)))
	if !s.loadStart.IsZero() && s.loadEnd.IsZero() {
		s.committed++
		sec := int(now.Sub(s.loadStart) / time.Second)
		for len(s.committedT) <= sec {
			s.committedT = append(s.committedT, 0)
		}
		s.committedT[sec]++
	}
}

func (s *stats) delivered(class string, lat time.Duration, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !live {
		s.catchupN++
		return
	}
	s.push[class] = append(s.push[class], max(0, ms(lat)))
	s.pushN[class]++
}

func (s *stats) catchup(d time.Duration) {
	s.mu.Lock()
	s.catch = append(s.catch, ms(d))
	s.mu.Unlock()
}

func (s *stats) add(p *int, n int) {
	s.mu.Lock()
	*p += n
	s.mu.Unlock()
}

// Dist summarises a latency distribution, in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

func distOf(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Dist{N: len(s), Mean: round(sum / float64(len(s))), P50: round(q(0.50)), P95: round(q(0.95)), P99: round(q(0.99)), Max: round(s[len(s)-1])}
}

func round(x float64) float64 { return math.Round(x*100) / 100 }
