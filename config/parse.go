package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the values one Parse looks at, counting every expansion of
// an alias: a small file with nested aliases ("billion laughs") could
// otherwise make a reload take forever. A real policy file is far below it.
const maxNodes = 100_000

// Load reads and parses the file at path (see Parse).
func Load(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	c, warns, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, warns, nil
}

// Parse resolves a configuration file. It fails only when data is not one
// YAML mapping: a syntax error, a key given twice in one mapping, an empty
// document (what a reader sees in the middle of an in-place rewrite; write
// "{}" for all defaults), a top level that is not a mapping, or a document
// too large once its aliases are expanded. Every other problem resolves to
// the value's safe side (see the package comment) and adds a warning naming
// the key path, the line and what was done instead. Warnings come in file
// order; extra YAML documents after the first are ignored with a warning.
func Parse(data []byte) (c *Config, warnings []string, err error) {
	// The YAML library turns its own failures into errors; anything else it
	// panics with is a bug in it, and a reload must not take the server
	// down for it.
	defer func() {
		if r := recover(); r != nil {
			c, warnings, err = nil, nil, fmt.Errorf("yaml: internal error: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, errors.New("empty file: want a mapping (write {} for all defaults)")
		}
		return nil, nil, err
	}
	p := &parser{budget: maxNodes}
	root := p.deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = p.deref(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		if isNull(root) {
			return nil, nil, errors.New("empty document: want a mapping (write {} for all defaults)")
		}
		return nil, nil, fmt.Errorf("line %d: the top level is a %s, want a mapping", root.Line, kind(root))
	}
	c = p.config(root)
	if p.err != nil {
		return nil, nil, p.err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, err
	default:
		p.warn("", &extra, "a second YAML document: ignored, only the first is read")
	}
	warnings = p.warnings()
	c.warnings = len(warnings)
	return c, warnings, nil
}

// parser walks the YAML tree of one Parse and collects warnings.
type parser struct {
	warns  []warning
	budget int
	err    error // the document is unusable; Parse fails
}

type warning struct {
	line int
	msg  string
}

// warnings returns the warnings in file order.
func (p *parser) warnings() []string {
	slices.SortStableFunc(p.warns, func(a, b warning) int { return a.line - b.line })
	var out []string
	for _, w := range p.warns {
		out = append(out, w.msg)
	}
	return out
}

// pair is one key of a mapping, with the value's alias resolved.
type pair struct {
	key  string
	path string
	k, v *yaml.Node
}

func (p *parser) warn(path string, n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path == "" {
		msg = fmt.Sprintf("line %d: %s", n.Line, msg)
	} else {
		msg = fmt.Sprintf("%s (line %d): %s", path, n.Line, msg)
	}
	p.warns = append(p.warns, warning{n.Line, msg})
}

// spend takes n from the budget; false (and p.err set) when it is gone.
func (p *parser) spend(n int) bool {
	p.budget -= n
	if p.budget < 0 && p.err == nil {
		p.err = fmt.Errorf("the document expands to more than %d values (nested aliases?)", maxNodes)
	}
	return p.err == nil
}

// deref follows aliases to the node they name.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil && p.spend(1) {
		n = n.Alias
	}
	return n
}

// pairs returns the string keys of mapping n in file order, merge keys
// ("<<: *base") expanded after them, keys given explicitly winning. A key
// that is not a string is warned about and skipped; a key given twice makes
// the document unusable (as YAML itself says).
func (p *parser) pairs(n *yaml.Node, path string) []pair { return p.pairsAt(n, path, 0) }

// pairsAt is pairs inside depth merges; depth stops a mapping that merges
// itself.
func (p *parser) pairsAt(n *yaml.Node, path string, depth int) []pair {
	var out []pair
	seen := map[string]int{} // key → line
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content) && p.spend(1); i += 2 {
		k, v := p.deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.warn(path, k, "the key %s is not a string: ignored", show(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			if p.err == nil {
				p.err = fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, line)
			}
			return nil
		}
		seen[k.Value] = k.Line
		out = append(out, pair{key: k.Value, path: join(path, k.Value), k: k, v: p.deref(v)})
	}
	p.merge(&out, seen, merges, path, depth)
	return out
}

// merge appends the keys of merged mappings that are not set yet.
func (p *parser) merge(out *[]pair, seen map[string]int, merges []*yaml.Node, path string, depth int) {
	for _, m := range merges {
		m = p.deref(m)
		var maps []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			maps = []*yaml.Node{m}
		case yaml.SequenceNode:
			for _, e := range m.Content {
				maps = append(maps, p.deref(e))
			}
		}
		for _, mm := range maps {
			switch {
			case mm.Kind != yaml.MappingNode:
				p.warn(path, mm, "a merge key (<<) needs a mapping or a list of mappings: ignored")
				continue
			case depth >= 8:
				p.warn(path, mm, "merge keys (<<) nested too deep (a mapping merging itself?): ignored")
				continue
			}
			for _, kv := range p.pairsAt(mm, path, depth+1) {
				if _, ok := seen[kv.key]; !ok {
					seen[kv.key] = kv.k.Line
					*out = append(*out, kv)
				}
			}
		}
	}
}

// items returns the elements of sequence n, aliases resolved.
func (p *parser) items(n *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	for _, e := range n.Content {
		if !p.spend(1) {
			return nil
		}
		out = append(out, p.deref(e))
	}
	return out
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join appends a key to a dotted key path, quoting a key that would make
// the path ambiguous.
func join(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kind names the YAML type of n for a warning.
func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "string"
		case "!!int":
			return "integer"
		case "!!float":
			return "number"
		case "!!bool":
			return "boolean"
		case "!!null":
			return "null"
		}
		return "scalar " + n.ShortTag()
	}
	return "node"
}

// show quotes a scalar for a warning, cut short: enough to find it, not
// enough to flood a log.
func show(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind != yaml.ScalarNode:
		return "a " + kind(n)
	}
	v := n.Value
	if r := []rune(v); len(r) > 40 {
		v = string(r[:40]) + "…"
	}
	return strconv.Quote(v)
}

// text returns a string scalar.
func text(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", false
	}
	return n.Value, true
}

// integer returns an integer scalar. A quoted "60" is a string, and a string
// is not a number.
func integer(n *yaml.Node) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, false
	}
	var i int
	if err := n.Decode(&i); err != nil {
		return 0, false
	}
	return i, true
}

// duration returns a Go duration ("1m", "250ms"). A bare 0 is accepted: it
// needs no unit.
func duration(n *yaml.Node) (time.Duration, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	if t := n.ShortTag(); t != "!!str" && t != "!!int" {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	return d, err == nil
}

// boolean returns a YAML boolean (true, false). A quoted "true", yes, on or
// 1 is not one.
func boolean(n *yaml.Node) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, false
	}
	return b, true
}

// config resolves the top-level mapping.
func (p *parser) config(root *yaml.Node) *Config {
	c := Default()
	for _, kv := range p.pairs(root, "") {
		switch kv.key {
		case "timezone":
			p.timezone(c, kv)
		case "trusted_proxies":
			p.trustedProxies(c, kv)
		case "metrics":
			p.metrics(c, kv)
		case "rate_limits":
			p.rateLimits(c, kv)
		case "rate_limit_store":
			p.rateLimitStore(c, kv)
		case "access":
			p.access(c, kv)
		case "permissions":
			p.permissions(c, kv)
		case "switches":
			p.switches(c, kv)
		case "export":
			p.export(c, kv)
		case "timeouts":
			p.timeouts(c, kv)
		case "edit_window", "mention_all_max", "directory":
			p.chat(c, kv)
		case "max_file_size", "file_quota":
			p.files(c, kv)
		case "push":
			p.push(c, kv)
		default:
			p.warn(kv.path, kv.k, "unknown key: ignored")
		}
	}
	return c
}

// mapping returns the pairs of kv's value when it is a mapping. A null value
// is an empty mapping; anything else is warned about (with what the caller
// falls back to) and gives ok false.
func (p *parser) mapping(kv pair, fallback string) ([]pair, bool) {
	switch {
	case isNull(kv.v):
		return nil, true
	case kv.v.Kind == yaml.MappingNode:
		return p.pairs(kv.v, kv.path), true
	}
	p.warn(kv.path, kv.v, "%s is not a mapping: %s", show(kv.v), fallback)
	return nil, false
}

func (p *parser) timezone(c *Config, kv pair) {
	if isNull(kv.v) {
		return
	}
	name, ok := text(kv.v)
	name = strings.TrimSpace(name)
	var loc *time.Location
	var err error
	switch {
	case !ok || name == "":
		err = errors.New("not a zone name")
	case name == "Local":
		// The host's zone is what a fixed zone is meant to avoid: one file,
		// a different window on every host.
		err = errors.New("the host's zone is not a fixed zone")
	default:
		loc, err = time.LoadLocation(name)
	}
	if err != nil {
		c.zoneOK = false
		p.warn(kv.path, kv.v, "%s: %v: every access window is outside", show(kv.v), err)
		return
	}
	c.loc = loc
}

func (p *parser) trustedProxies(c *Config, kv pair) {
	if isNull(kv.v) {
		return
	}
	if kv.v.Kind != yaml.SequenceNode {
		p.warn(kv.path, kv.v, "%s is not a list: no proxy is trusted", show(kv.v))
		return
	}
	for i, e := range p.items(kv.v) {
		path := fmt.Sprintf("%s[%d]", kv.path, i)
		s, ok := text(e)
		if !ok {
			p.warn(path, e, "%s is not an address or CIDR: dropped, not trusted", show(e))
			continue
		}
		pfx, why := proxy(strings.TrimSpace(s))
		if why != "" {
			p.warn(path, e, "%s %s: dropped, not trusted", show(e), why)
			continue
		}
		if pfx.Bits() == 0 {
			p.warn(path, e, "%s trusts every address: any client can choose the address it is limited by", show(e))
		}
		c.proxies = append(c.proxies, pfx)
	}
}

// metrics reads metrics.allow: networks (CIDRs or addresses) that may
// read /metrics besides loopback. A bad entry is dropped.
func (p *parser) metrics(c *Config, kv pair) {
	fields, ok := p.mapping(kv, "/metrics answers loopback only")
	if !ok {
		return
	}
	for _, f := range fields {
		if f.key != "allow" {
			p.warn(f.path, f.k, "unknown key: ignored")
			continue
		}
		if isNull(f.v) {
			continue
		}
		if f.v.Kind != yaml.SequenceNode {
			p.warn(f.path, f.v, "%s is not a list: /metrics answers loopback only", show(f.v))
			continue
		}
		for i, e := range p.items(f.v) {
			path := fmt.Sprintf("%s[%d]", f.path, i)
			s, ok := text(e)
			if !ok {
				p.warn(path, e, "%s is not an address or CIDR: dropped", show(e))
				continue
			}
			pfx, why := proxy(strings.TrimSpace(s))
			if why != "" {
				p.warn(path, e, "%s %s: dropped", show(e), why)
				continue
			}
			c.metricsAllow = append(c.metricsAllow, pfx)
		}
	}
}

// proxy parses a trusted proxy entry: a CIDR, or one address. why says what
// is wrong with a bad one.
func proxy(s string) (pfx netip.Prefix, why string) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return pfx, "is not a CIDR"
		}
		if pfx != pfx.Masked() {
			// 10.1.2.3/8 is most likely a typo for /32 or for 10.0.0.0/8;
			// guessing could trust a whole network nobody meant.
			return pfx, fmt.Sprintf("has host bits set (did you mean %s or %s?)", pfx.Masked(), netip.PrefixFrom(pfx.Addr(), pfx.Addr().BitLen()))
		}
		return pfx, ""
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, "is not an address or CIDR"
	}
	if addr.Zone() != "" {
		return netip.Prefix{}, "has a zone"
	}
	addr = addr.Unmap()
	return netip.PrefixFrom(addr, addr.BitLen()), ""
}

// rateLimits reads the section: a bucket it names replaces that bucket's
// default; an empty section (rate_limits: {}) turns every default off, and
// so does a malformed one (off is the safe side of a value in doubt).
func (p *parser) rateLimits(c *Config, kv pair) {
	buckets, ok := p.mapping(kv, "no route is rate limited")
	if !ok || len(buckets) == 0 {
		c.builtin = nil
		return
	}
	for _, b := range buckets {
		c.limits[b.key] = p.rateLimit(b)
	}
}

// rateLimit resolves one bucket; any doubt turns it off.
func (p *parser) rateLimit(kv pair) Limit {
	const off = "rate limit off for this bucket"
	if kv.v.Kind != yaml.MappingNode {
		p.warn(kv.path, kv.v, "%s is not a mapping {limit, window}: %s", show(kv.v), off)
		return Limit{}
	}
	l := Limit{Window: DefaultRateWindow}
	limitSet, ok := false, true
	for _, f := range p.pairs(kv.v, kv.path) {
		switch f.key {
		case "limit":
			if isNull(f.v) {
				continue
			}
			limitSet = true
			n, isInt := integer(f.v)
			switch {
			case !isInt:
				p.warn(f.path, f.v, "%s is not an integer: %s", show(f.v), off)
				ok = false
			case n < 0:
				p.warn(f.path, f.v, "negative: %s", off)
				ok = false
			}
			l.Limit = n
		case "window":
			if isNull(f.v) {
				continue
			}
			d, isDur := duration(f.v)
			switch {
			case !isDur:
				p.warn(f.path, f.v, "%s is not a duration (like 1m or 30s): %s", show(f.v), off)
				ok = false
			case d <= 0:
				p.warn(f.path, f.v, "not positive: %s", off)
				ok = false
			}
			l.Window = d
		default:
			p.warn(f.path, f.k, "unknown key: ignored")
		}
	}
	if !limitSet {
		p.warn(kv.path, kv.v, "no limit: %s", off)
	}
	if !ok || l.Limit <= 0 {
		return Limit{}
	}
	return l
}

func (p *parser) rateLimitStore(c *Config, kv pair) {
	fields, ok := p.mapping(kv, "rate limits stay local")
	if !ok {
		return
	}
	for _, f := range fields {
		if f.key != "redis" {
			p.warn(f.path, f.k, "unknown key: ignored")
			continue
		}
		if isNull(f.v) {
			continue
		}
		s, ok := text(f.v)
		s = strings.TrimSpace(s)
		if ok && s == "" {
			continue
		}
		var err error
		if !ok {
			err = fmt.Errorf("%s is not a URL string", show(f.v))
		} else {
			s, err = checkRedisURL(s)
		}
		if err != nil {
			// The URL may hold a password: never echo it.
			p.warn(f.path, f.v, "%v: rate limits stay local", err)
			continue
		}
		c.redisURL = s
	}
}

// checkRedisURL accepts what a Redis client takes,
// redis[s]://[[user]:password@]host[:port][/db], and returns it with the
// scheme in lower case.
func checkRedisURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return "", fmt.Errorf("not a URL (%v)", err)
	}
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return "", errors.New("not a redis:// or rediss:// URL")
	case u.Opaque != "" || u.Hostname() == "":
		return "", errors.New("the URL has no host")
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return "", errors.New("the URL path is not a database number")
		}
	}
	return u.Scheme + s[len(u.Scheme):], nil
}

// redactURL hides the password of a URL; "" stays "".
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "xxxxx"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

func (p *parser) access(c *Config, kv pair) {
	features, ok := p.mapping(kv, "every feature is CLOSED")
	if !ok {
		for name := range c.features {
			c.features[name] = feature{mode: ModeClosed}
		}
		return
	}
	for _, f := range features {
		c.features[f.key] = p.feature(f)
	}
}

// feature resolves the access of one gated feature.
func (p *parser) feature(kv pair) feature {
	def, known := defaultModes[kv.key]
	if !known {
		def = ModeClosed
	}
	if isNull(kv.v) {
		return feature{mode: def}
	}
	if kv.v.Kind != yaml.MappingNode {
		p.warn(kv.path, kv.v, "%s is not a mapping {mode, window}: CLOSED", show(kv.v))
		return feature{mode: ModeClosed}
	}
	f := feature{mode: def}
	var modeSet bool
	var window *pair
	for _, e := range p.pairs(kv.v, kv.path) {
		switch e.key {
		case "mode":
			if isNull(e.v) {
				continue
			}
			s, ok := text(e.v)
			if ok && strings.TrimSpace(s) == "" {
				continue // blank is missing
			}
			modeSet = true
			f.mode = ModeClosed
			switch Mode(strings.ToUpper(strings.TrimSpace(s))) {
			case ModeOpen:
				f.mode = ModeOpen
			case ModeTestWindow:
				f.mode = ModeTestWindow
			case ModeClosed:
			default:
				p.warn(e.path, e.v, "%s is not OPEN, TEST_WINDOW or CLOSED: CLOSED", show(e.v))
			}
		case "window":
			if !isNull(e.v) {
				window = &e
			}
		default:
			p.warn(e.path, e.k, "unknown key: ignored")
		}
	}
	if window != nil {
		f.window, f.hasWindow = p.window(*window), true
	}
	switch {
	case f.mode == ModeTestWindow && window == nil:
		p.warn(kv.path, kv.v, "TEST_WINDOW without a window: always outside")
	case f.mode != ModeTestWindow && window != nil && !modeSet:
		p.warn(kv.path, kv.v, "a window without a mode: the default mode %s applies and the window is ignored (set mode: TEST_WINDOW)", f.mode)
	}
	return f
}

var hhmm = regexp.MustCompile(`^([01][0-9]|2[0-4]):([0-5][0-9])$`)

// window resolves an access window; any missing or bad field makes it the
// zero Window, which is never inside.
func (p *parser) window(kv pair) Window {
	const outside = "the window is always outside"
	if kv.v.Kind != yaml.MappingNode {
		p.warn(kv.path, kv.v, "%s is not a mapping {days, from, to}: %s", show(kv.v), outside)
		return Window{}
	}
	var w Window
	ok := true
	fields := map[string]bool{}
	for _, f := range p.pairs(kv.v, kv.path) {
		switch f.key {
		case "days":
			fields[f.key] = true
			if !p.days(&w, f) {
				ok = false
			}
		case "from", "to":
			fields[f.key] = true
			s, isStr := text(f.v)
			m := hhmm.FindStringSubmatch(strings.TrimSpace(s))
			var minutes int
			if m != nil {
				h, _ := strconv.Atoi(m[1])
				mm, _ := strconv.Atoi(m[2])
				minutes = h*60 + mm
			}
			// 24:00 is the end of the day: a valid "to" only.
			if !isStr || m == nil || minutes > 24*60 || minutes == 24*60 && f.key == "from" {
				p.warn(f.path, f.v, "%s is not a time HH:MM: %s", show(f.v), outside)
				ok = false
				continue
			}
			if f.key == "from" {
				w.from = minutes
			} else {
				w.to = minutes
			}
		default:
			p.warn(f.path, f.k, "unknown key: ignored")
		}
	}
	for _, name := range []string{"days", "from", "to"} {
		if !fields[name] {
			p.warn(kv.path, kv.v, "%s is missing: %s", name, outside)
			ok = false
		}
	}
	if ok && w.from >= w.to {
		p.warn(kv.path, kv.v, "from %s is not before to %s (windows do not cross midnight): %s", clock(w.from), clock(w.to), outside)
		ok = false
	}
	if !ok {
		return Window{}
	}
	w.valid = true
	return w
}

// days reads the days of a window into w.
func (p *parser) days(w *Window, kv pair) bool {
	const outside = "the window is always outside"
	switch {
	case kv.v.Kind != yaml.SequenceNode:
		p.warn(kv.path, kv.v, "%s is not a list of days (mon..sun): %s", show(kv.v), outside)
		return false
	case len(kv.v.Content) == 0:
		p.warn(kv.path, kv.v, "no days: %s", outside)
		return false
	}
	for i, e := range p.items(kv.v) {
		s, _ := text(e)
		d := slices.Index(dayNames[:], strings.ToLower(strings.TrimSpace(s)))
		if d < 0 {
			p.warn(fmt.Sprintf("%s[%d]", kv.path, i), e, "%s is not a day (mon..sun): %s", show(e), outside)
			return false
		}
		w.days[d] = true
	}
	return true
}

func (p *parser) permissions(c *Config, kv pair) {
	rules, ok := p.mapping(kv, "every permission rule denies")
	if !ok {
		clear(c.perms)
		return
	}
	for _, r := range rules {
		c.perms[r.key] = p.roles(r)
	}
}

// roles resolves one permission rule; anything but a list of known roles
// denies everyone.
func (p *parser) roles(kv pair) []string {
	const deny = "the rule denies everyone"
	if kv.v.Kind != yaml.SequenceNode {
		p.warn(kv.path, kv.v, "%s is not a list of roles (%s): %s", show(kv.v), strings.Join(knownRoles, ", "), deny)
		return []string{}
	}
	roles := []string{}
	for i, e := range p.items(kv.v) {
		s, _ := text(e)
		role := strings.ToLower(strings.TrimSpace(s))
		if !slices.Contains(knownRoles, role) {
			p.warn(fmt.Sprintf("%s[%d]", kv.path, i), e, "%s is not a role (%s): %s", show(e), strings.Join(knownRoles, ", "), deny)
			return []string{}
		}
		if !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
	}
	return roles
}

func (p *parser) switches(c *Config, kv pair) {
	names, ok := p.mapping(kv, "every switch is off")
	if !ok {
		return
	}
	for _, s := range names {
		on, isBool := boolean(s.v)
		if !isBool && !isNull(s.v) {
			p.warn(s.path, s.v, "%s is not true or false: off (the old flow)", show(s.v))
		}
		c.switches[s.key] = on
	}
}

// maxKept reads export.max_kept. Bad is the default, not a clamp: 0 or a
// negative count reads like "unbounded", which a mistake must never give.
func (p *parser) maxKept(path string, v *yaml.Node) int {
	n, ok := integer(v)
	switch {
	case !ok:
		p.warn(path, v, "%s is not an integer: the default %d applies", show(v), DefaultExportMaxKept)
	case n < 1:
		p.warn(path, v, "below 1: the default %d applies", DefaultExportMaxKept)
	default:
		return n
	}
	return DefaultExportMaxKept
}

func (p *parser) export(c *Config, kv pair) {
	fields, _ := p.mapping(kv, "export defaults apply")
	for _, f := range fields {
		if isNull(f.v) {
			continue // the default applies
		}
		switch f.key {
		case "retries":
			n, ok := integer(f.v)
			switch {
			case !ok:
				p.warn(f.path, f.v, "%s is not an integer: the default %d applies", show(f.v), DefaultExportRetries)
			case n < 0:
				p.warn(f.path, f.v, "negative: clamped to 0")
				c.retries = 0
			default:
				c.retries = n
			}
		case "backoff":
			d, ok := duration(f.v)
			switch {
			case !ok:
				p.warn(f.path, f.v, "%s is not a duration (like 1s): the default %s applies", show(f.v), DefaultExportBackoff)
			case d < 0:
				p.warn(f.path, f.v, "negative: clamped to 0")
				c.backoff = 0
			default:
				c.backoff = d
			}
		case "keep":
			d, ok := duration(f.v)
			switch {
			case !ok:
				p.warn(f.path, f.v, "%s is not a duration (like 168h): the default %s applies", show(f.v), DefaultExportKeep)
			case d <= 0:
				p.warn(f.path, f.v, "not positive: the default %s applies", DefaultExportKeep)
			default:
				c.keep = d
			}
		case "max_active":
			n, ok := integer(f.v)
			switch {
			case !ok:
				p.warn(f.path, f.v, "%s is not an integer: the default %d applies", show(f.v), DefaultExportMaxActive)
			case n < 1:
				p.warn(f.path, f.v, "below 1: clamped to 1")
				c.maxActive = 1
			default:
				c.maxActive = n
			}
		case "max_kept":
			c.maxKept = p.maxKept(f.path, f.v)
		case "signing_key":
			id, ok := text(f.v)
			if !ok || id == "" {
				p.warn(f.path, f.v, "%s is not a key id: links are signed with the key the store keeps", show(f.v))
				continue
			}
			c.signKey = id
		case "signing_keys":
			p.signingKeys(c, f)
		default:
			p.warn(f.path, f.k, "unknown key: ignored")
		}
	}
	if _, ok := c.signKeys[c.signKey]; c.signKey != "" && !ok {
		p.warn("export.signing_key", kv.v, "%q names no usable key of export.signing_keys: links are signed with the key the store keeps", c.signKey)
		c.signKey = ""
	}
}

// signingKeys reads export.signing_keys, a mapping of key id to secret. A
// secret shorter than MinSigningSecret bytes is dropped: a guessable key
// would sign links for anyone.
func (p *parser) signingKeys(c *Config, kv pair) {
	keys, ok := p.mapping(kv, "no signing keys")
	if !ok {
		return
	}
	for _, k := range keys {
		secret, ok := text(k.v)
		switch {
		case !ok:
			p.warn(k.path, k.v, "%s is not a string: key dropped", kind(k.v))
		case len(secret) < MinSigningSecret:
			p.warn(k.path, k.v, "shorter than %d bytes: key dropped", MinSigningSecret)
		case !validKeyID(k.key):
			p.warn(k.path, k.k, "a key id is 1–32 letters, digits, '-' or '_': key dropped")
		default:
			c.signKeys[k.key] = []byte(secret)
		}
	}
}

// validKeyID reports whether id can name a signing key in a link.
func validKeyID(id string) bool {
	return len(id) >= 1 && len(id) <= 32 && plainKey.MatchString(id)
}

// redactKeys shows the ids of the signing keys, never their secrets.
func redactKeys(keys map[string][]byte) map[string]any {
	out := make(map[string]any, len(keys))
	for id := range keys {
		out[id] = "xxxxx"
	}
	return out
}

func (p *parser) timeouts(c *Config, kv pair) {
	fields, _ := p.mapping(kv, "default timeouts apply")
	for _, f := range fields {
		var dst *time.Duration
		var def time.Duration
		switch f.key {
		case "store":
			dst, def = &c.storeTimeout, DefaultStoreTimeout
		case "redis":
			dst, def = &c.redisTimeout, DefaultRedisTimeout
		case "identity":
			dst, def = &c.identityTimeout, DefaultIdentityTimeout
		default:
			p.warn(f.path, f.k, "unknown key: ignored")
			continue
		}
		if isNull(f.v) {
			continue
		}
		d, ok := duration(f.v)
		switch {
		case !ok:
			p.warn(f.path, f.v, "%s is not a duration (like 2s): the default %s applies", show(f.v), def)
		case d <= 0:
			// Zero would mean no deadline at all: a hang, which timeouts
			// exist to prevent.
			p.warn(f.path, f.v, "not positive: the default %s applies", def)
		default:
			*dst = d
		}
	}
}

// chat reads the policy keys of edits, mentions and the directory. A
// missing or malformed edit window is none (edits are never refused by a
// typo); a malformed @all limit is the default and a negative one 0 (@all
// off); an unknown directory policy is shared, the side that shows fewer
// users.
func (p *parser) chat(c *Config, kv pair) {
	if isNull(kv.v) {
		return // the default applies
	}
	switch kv.key {
	case "edit_window":
		d, ok := duration(kv.v)
		switch {
		case !ok:
			p.warn(kv.path, kv.v, "%s is not a duration (like 15m): no edit window", show(kv.v))
		case d < 0:
			p.warn(kv.path, kv.v, "negative: no edit window")
		default:
			c.editWindow = d
		}
	case "mention_all_max":
		n, ok := integer(kv.v)
		switch {
		case !ok:
			p.warn(kv.path, kv.v, "%s is not an integer: the default %d applies", show(kv.v), DefaultMentionAllMax)
		case n < 0:
			p.warn(kv.path, kv.v, "negative: clamped to 0 (@all mentions nobody)")
			c.mentionAllMax = 0
		default:
			c.mentionAllMax = n
		}
	case "directory":
		v, ok := text(kv.v)
		switch v = strings.ToLower(strings.TrimSpace(v)); {
		case ok && (v == DirectoryAll || v == DirectoryShared):
			c.directory = v
		default:
			p.warn(kv.path, kv.v, "%s is not all or shared: shared applies", show(kv.v))
			c.directory = DirectoryShared
		}
	}
}

// files reads the file limits: a byte count (an integer) or a size with a
// binary unit ("100MiB", "10 GiB"; KiB, MiB, GiB, TiB). A malformed or
// non-positive value is the default: the documented limit is the side a
// typo costs least on (neither every upload refused nor no limit at all).
func (p *parser) files(c *Config, kv pair) {
	if isNull(kv.v) {
		return
	}
	def, dst := int64(DefaultMaxFileSize), &c.maxFileSize
	if kv.key == "file_quota" {
		def, dst = DefaultFileQuota, &c.fileQuota
	}
	n, ok := byteSize(kv.v)
	switch {
	case !ok:
		p.warn(kv.path, kv.v, "%s is not a size (bytes, or like 100MiB): the default %d applies", show(kv.v), def)
	case n < 1:
		p.warn(kv.path, kv.v, "not positive: the default %d applies", def)
	default:
		*dst = n
	}
}

// byteSize reads an integer byte count or a string of a whole number and a
// binary unit.
func byteSize(n *yaml.Node) (int64, bool) {
	if i, ok := integer(n); ok {
		return int64(i), true
	}
	s, ok := text(n)
	if !ok {
		return 0, false
	}
	return ParseSize(s)
}

// ParseSize reads "N", "N B", "N KiB", "N MiB", "N GiB" or "N TiB" (the
// space optional, the unit case-insensitive) as bytes; ok is false for
// anything else and for sizes that do not fit an int64.
func ParseSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	shift := map[string]uint{"": 0, "b": 0, "kib": 10, "mib": 20, "gib": 30, "tib": 40}
	sh, ok := shift[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok || n > (1<<62)>>sh {
		return 0, false
	}
	return n << sh, true
}

// push reads push.allow_endpoints (URL prefixes; a bad entry is dropped:
// an endpoint it would have allowed stays checked) and push.subject.
func (p *parser) push(c *Config, kv pair) {
	fields, ok := p.mapping(kv, "no endpoint is exempt from the address checks")
	if !ok {
		return
	}
	for _, f := range fields {
		switch {
		case f.key == "subject":
			v, ok := text(f.v)
			v = strings.TrimSpace(v)
			if !ok || !validSubject(v) {
				p.warn(f.path, f.v, "%s is not a mailto: or https: URI: the server's default applies", show(f.v))
				continue
			}
			c.pushSubject = v
		case f.key != "allow_endpoints":
			p.warn(f.path, f.k, "unknown key: ignored")
		case isNull(f.v):
		case f.v.Kind != yaml.SequenceNode:
			p.warn(f.path, f.v, "%s is not a list: no endpoint is exempt", show(f.v))
		default:
			for i, e := range p.items(f.v) {
				path := fmt.Sprintf("%s[%d]", f.path, i)
				s, ok := text(e)
				if why := endpointPrefix(s); !ok || why != "" {
					p.warn(path, e, "%s %s: dropped", show(e), cmp.Or(why, "is not a URL prefix"))
					continue
				}
				c.pushAllow = append(c.pushAllow, s)
			}
		}
	}
}

// endpointPrefix says what is wrong with an allow_endpoints entry ("" when
// nothing): it must be http:// or https:// followed by at least a host's
// first character, printable ASCII without spaces, so no entry exempts
// every endpoint.
func endpointPrefix(s string) string {
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		rest, ok = strings.CutPrefix(s, "http://")
	}
	switch {
	case !ok:
		return "does not start with http:// or https://"
	case rest == "" || strings.HasPrefix(rest, "/") || strings.HasPrefix(rest, ":"):
		return "names no host (it would exempt every endpoint)"
	}
	for _, r := range s {
		if r <= 0x20 || r >= 0x7f {
			return "holds a space or a character that is not printable ASCII"
		}
	}
	return ""
}

// validSubject reports whether s may be a VAPID sub claim.
func validSubject(s string) bool {
	if len(s) > 256 {
		return false
	}
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "mailto":
		return u.Opaque != ""
	case "https":
		return u.Host != ""
	}
	return false
}
