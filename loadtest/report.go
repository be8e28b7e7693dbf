package loadtest

import (
	"context"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is the outcome of a run: its figures and the acceptance check.
type Report struct {
	Started           time.Time      `json:"started"`
	Servers           []string       `json:"servers"`
	Gateways          int            `json:"gateways_spawned"`
	GatewayCPU        float64        `json:"gateway_cpu_cores,omitempty"` // each spawned gateway's cap
	GatewayThrottled  []float64      `json:"gateway_throttled,omitempty"` // per gateway: share of CPU periods it waited at its cap
	Faults            string         `json:"faults,omitempty"`
	Users             int            `json:"users"`
	Devices           int            `json:"devices"`
	Conversations     map[string]int `json:"conversations"` // by class
	Mode              string         `json:"mode"`          // open or closed loop
	TargetRate        float64        `json:"target_sends_per_s,omitempty"`
	DurationS         float64        `json:"duration_s"`
	Enqueued          int            `json:"enqueued"`
	Committed         int            `json:"committed_in_load_phase"`
	CommittedPerSec   float64        `json:"committed_sends_per_s"`
	CommittedTimeline []int          `json:"committed_per_second"`
	Outcomes          map[string]int `json:"outcomes"` // kind:code → items

	SendLatency       Dist               `json:"send_to_sent"`
	RecallLatency     Dist               `json:"recall_to_recalled"`
	DeliveryLatency   Dist               `json:"commit_to_push"` // every class
	DeliveryByClass   map[string]Dist    `json:"commit_to_push_by_class"`
	DeliveriesPerS    map[string]float64 `json:"push_deliveries_per_s_by_class"`
	CatchupDeliveries int                `json:"catchup_deliveries"` // applied by a (re)connect's sync
	CatchUp           Dist               `json:"reconnect_catch_up"`

	Reconnects        int `json:"reconnects"`
	MembershipChanges int `json:"membership_changes"`
	Recalls           int `json:"recalls"`
	Reads             int `json:"reads"`
	ReadErrors        int `json:"read_errors"`
	Kills             int `json:"gateway_kills"`

	Server []ServerStats `json:"server_processes"`

	Pass           bool        `json:"pass"`
	ViolationCount int         `json:"violation_count"`
	Violations     []Violation `json:"violations,omitempty"` // the first 100

	samples map[string][]float64 // latency samples for the plot
}

// ServerStats is one server process's CPU and memory over the run, from
// its /metrics.
type ServerStats struct {
	URL        string   `json:"url"`
	CPUSeconds float64  `json:"cpu_seconds"`
	CPUCores   float64  `json:"cpu_cores_mean"` // CPU seconds per wall second over the load phase
	RSSMaxMiB  float64  `json:"rss_max_mib"`
	Samples    []Sample `json:"samples"`
}

// Sample is one reading of a server's process metrics.
type Sample struct {
	T      float64 `json:"t_s"` // seconds since the load began
	CPU    float64 `json:"cpu_s"`
	RSSMiB float64 `json:"rss_mib"`
}

// sampler reads every server's CPU and memory each second of the load.
func (r *runner) sampler(ctx context.Context) {
	r.sample(ctx, time.Time{})
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sample(ctx, time.Time{})
		}
	}
}

// sample records one reading per server; at, when set, is the time the
// reading stands for (the end of the load).
func (r *runner) sample(ctx context.Context, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, a := range r.apis {
		cpu, rss, err := a.processStats(ctx)
		if err != nil {
			continue // down (killed) or no metrics
		}
		r.memMu.Lock()
		r.samples[a.base] = append(r.samples[a.base], Sample{T: round(at.Sub(r.loadStart).Seconds()), CPU: round(cpu), RSSMiB: round(rss / (1 << 20))})
		r.memMu.Unlock()
	}
}

func (r *runner) report(t Truth, vs []Violation, load time.Duration) *Report {
	s := r.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &Report{
		Started: r.loadStart.UTC(), Gateways: len(r.gws), Faults: r.cfg.Faults,
		Users: len(r.byUser), Devices: len(r.devices), Conversations: map[string]int{},
		Mode: "open", TargetRate: r.cfg.Rate, DurationS: round(load.Seconds()),
		Enqueued: s.enqueued, Committed: s.committed, CommittedTimeline: s.committedT,
		Outcomes: s.codes, SendLatency: distOf(s.send), RecallLatency: distOf(s.recall),
		DeliveryByClass: map[string]Dist{}, DeliveriesPerS: map[string]float64{},
		CatchupDeliveries: s.catchupN, CatchUp: distOf(s.catch),
		Reconnects: s.reconnects, MembershipChanges: s.churn, Recalls: s.recalls, Reads: s.reads,
		ReadErrors: s.readErrs, Kills: s.kills, Pass: len(vs) == 0, ViolationCount: len(vs),
		samples: map[string][]float64{"send → sent": s.send, "reconnect → caught up": s.catch},
	}
	if r.cfg.GatewayCPU > 0 {
		rep.GatewayCPU = r.cfg.GatewayCPU
		for _, g := range r.gws {
			rep.GatewayThrottled = append(rep.GatewayThrottled, round(g.throttled()))
		}
	}
	if r.cfg.Rate <= 0 {
		rep.Mode = "closed"
	}
	if load > 0 {
		rep.CommittedPerSec = round(float64(s.committed) / load.Seconds())
	}
	for _, c := range r.convs {
		rep.Conversations[c.class]++
	}
	var all []float64
	for class, xs := range s.push {
		rep.DeliveryByClass[class] = distOf(xs)
		if load > 0 {
			rep.DeliveriesPerS[class] = round(float64(s.pushN[class]) / load.Seconds())
		}
		all = append(all, xs...)
		rep.samples["commit → push ("+class+")"] = xs
	}
	rep.DeliveryLatency = distOf(all)
	if len(vs) > 100 {
		vs = vs[:100]
	}
	rep.Violations = vs
	r.memMu.Lock()
	for _, a := range r.apis {
		ss := ServerStats{URL: a.base, Samples: r.samples[a.base]}
		if n := len(ss.Samples); n > 0 {
			// Across a restart the counter starts over: sum the rises.
			var cpu float64
			for i := 1; i < n; i++ {
				if d := ss.Samples[i].CPU - ss.Samples[i-1].CPU; d > 0 {
					cpu += d
				} else {
					cpu += ss.Samples[i].CPU
				}
			}
			ss.CPUSeconds = round(cpu)
			if span := ss.Samples[n-1].T - ss.Samples[0].T; span > 0 {
				ss.CPUCores = round(cpu / span)
			}
			for _, x := range ss.Samples {
				ss.RSSMaxMiB = max(ss.RSSMaxMiB, x.RSSMiB)
			}
		}
		rep.Server = append(rep.Server, ss)
	}
	r.memMu.Unlock()
	return rep
}

// Text writes the one-screen summary.
func (rep *Report) Text(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	classes := make([]string, 0, len(rep.Conversations))
	for c := range rep.Conversations {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var convs []string
	for _, c := range classes {
		convs = append(convs, fmt.Sprintf("%d %s", rep.Conversations[c], c))
	}
	p("parley bench: %d users, %d devices, %s; %s loop%s, %.0f s; %d gateway(s)%s",
		rep.Users, rep.Devices, strings.Join(convs, ", "), rep.Mode, rateText(rep), rep.DurationS, len(rep.Servers), faultText(rep.Faults))
	p("committed      %d sends in the load phase: %.1f sends/s (%d enqueued)", rep.Committed, rep.CommittedPerSec, rep.Enqueued)
	p("%-14s %8s %9s %9s %9s %9s", "latency (ms)", "n", "p50", "p95", "p99", "max")
	row := func(name string, d Dist) {
		p("%-14s %8d %9.1f %9.1f %9.1f %9.1f", name, d.N, d.P50, d.P95, d.P99, d.Max)
	}
	row("send→sent", rep.SendLatency)
	if rep.RecallLatency.N > 0 {
		row("recall→done", rep.RecallLatency)
	}
	row("commit→push", rep.DeliveryLatency)
	for _, c := range slices.Sorted(maps.Keys(rep.DeliveryByClass)) {
		row("  "+c, rep.DeliveryByClass[c])
	}
	row("catch-up", rep.CatchUp)
	var dps []string
	for _, c := range slices.Sorted(maps.Keys(rep.DeliveriesPerS)) {
		dps = append(dps, fmt.Sprintf("%s %.0f", c, rep.DeliveriesPerS[c]))
	}
	p("deliveries/s   %s (plus %d applied by catch-up syncs)", strings.Join(dps, ", "), rep.CatchupDeliveries)
	p("events         %d reconnects, %d membership changes, %d recalls, %d reads (%d failed), %d gateway kills",
		rep.Reconnects, rep.MembershipChanges, rep.Recalls, rep.Reads, rep.ReadErrors, rep.Kills)
	for _, s := range rep.Server {
		p("server         %s: %.1f CPU s (%.2f cores), max RSS %.0f MiB", s.URL, s.CPUSeconds, s.CPUCores, s.RSSMaxMiB)
	}
	if rep.GatewayCPU > 0 {
		p("gateway cap    %.2f cores each; periods throttled: %v", rep.GatewayCPU, rep.GatewayThrottled)
	}
	var oc []string
	for _, k := range slices.Sorted(maps.Keys(rep.Outcomes)) {
		oc = append(oc, fmt.Sprintf("%s %d", k, rep.Outcomes[k]))
	}
	p("outcomes       %s", strings.Join(oc, ", "))
	if rep.Pass {
		p("acceptance     PASS: every device's log equals what its user may see; every item ended once; unread counts match")
		return
	}
	p("acceptance     FAIL: %d violation(s); the first:", rep.ViolationCount)
	for i, v := range rep.Violations {
		if i == 10 {
			break
		}
		p("  %s", v)
	}
}

func rateText(rep *Report) string {
	if rep.Mode == "open" {
		return fmt.Sprintf(" at %.0f sends/s", rep.TargetRate)
	}
	return ""
}

func faultText(f string) string {
	if f == "" {
		return ""
	}
	return "; faults " + f
}

// SVG writes the latency plot: one CDF per figure, latency on a log axis.
func (rep *Report) SVG(w io.Writer) error {
	const W, H, left, right, top, bottom = 900.0, 520.0, 70.0, 230.0, 40.0, 60.0
	pw, ph := W-left-right, H-top-bottom
	names := slices.Sorted(maps.Keys(rep.samples))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, n := range names {
		for _, x := range rep.samples[n] {
			x = max(x, 0.1)
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 1000
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	xOf := func(v float64) float64 {
		return left + pw*(math.Log10(max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	yOf := func(q float64) float64 { return top + ph*(1-q) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="15">%s</text>`+"\n", left, html.EscapeString(fmt.Sprintf(
		"parley bench: latency CDFs (%d devices, %.1f committed sends/s, %s)", rep.Devices, rep.CommittedPerSec, passText(rep.Pass))))
	for d := lo; d <= hi*1.001; d *= 10 {
		x := xOf(d)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, top, x, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+18, msLabel(d))
	}
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
		y := yOf(q)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+pw, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y+4, q)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">latency (ms, log scale)</text>`+"\n", left+pw/2, H-18)
	fmt.Fprintf(&b, `<text x="18" y="%.1f" transform="rotate(-90 18 %.1f)" text-anchor="middle">fraction at or below</text>`+"\n", top+ph/2, top+ph/2)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}
	i := 0
	for _, n := range names {
		xs := slices.Clone(rep.samples[n])
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		col := colors[i%len(colors)]
		var pts []string
		step := max(1, len(xs)/600)
		for k := 0; k < len(xs); k += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(xs[k]), yOf(float64(k+1)/float64(len(xs)))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(xs[len(xs)-1]), yOf(1)))
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		ly := top + 10 + float64(i)*34
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", left+pw+12, ly, left+pw+32, ly, col)
		d := distOf(xs)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+38, ly+4, html.EscapeString(n))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555">n=%d p50=%s p99=%s</text>`+"\n", left+pw+38, ly+17, d.N, msLabel(d.P50), msLabel(d.P99))
		i++
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func passText(ok bool) string {
	if ok {
		return "check passed"
	}
	return "CHECK FAILED"
}

func msLabel(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gs", round(v/1000))
	case v >= 1:
		return fmt.Sprintf("%gms", math.Round(v*10)/10)
	}
	return fmt.Sprintf("%gms", round(v))
}
