package webpush

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Delivery (RFC 8030 §5): one POST of the encrypted payload to the
// subscription's endpoint, with TTL, Urgency and Topic.
//
// An endpoint is a URL a client chose, and the server calls it: without
// care, a subscription could make the server reach its own loopback, the
// private network or a cloud metadata service. So a Sender dials https
// endpoints only, checks the address of every connection when it is made
// (after name resolution: a name that resolves to an internal address is
// refused, however it resolved before), uses no proxy, and follows no
// redirect. An endpoint that an allow-list prefix matches (the policy's
// push.allow_endpoints) skips those checks: operators name their own push
// relay, and tests a receiver on 127.0.0.1.

// ErrRefusedAddress is wrapped by the error of a delivery whose
// connection went to an address a push may not reach.
var ErrRefusedAddress = errors.New("webpush: the endpoint's address is not a public unicast address")

// refusedPrefixes are the networks a push never reaches (besides what
// netip.Addr's own predicates name: loopback, private, link-local,
// multicast, unspecified).
var refusedPrefixes = mustPrefixes(
	"0.0.0.0/8",       // "this network"
	"100.64.0.0/10",   // carrier-grade NAT
	"169.254.0.0/16",  // link-local, the cloud metadata address among them
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"240.0.0.0/4",     // reserved, broadcast
	"64:ff9b::/96",    // NAT64: would reach any IPv4 address, internal ones too
	"64:ff9b:1::/48",  // local NAT64
	"100::/64",        // discard
	"2001:db8::/32",   // documentation
	"2002::/16",       // 6to4: embeds an IPv4 address
	"fc00::/7",        // unique local
	"fe80::/10",       // link-local
	"fec0::/10",       // site-local (deprecated, still routed by some)
	"::ffff:0:0/96",   // IPv4-mapped, checked unmapped as well
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// PublicAddress reports whether a push may connect to addr: a global
// unicast address outside every internal, reserved or translating range.
func PublicAddress(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	if addr.Is4In6() {
		return PublicAddress(addr.Unmap())
	}
	addr = addr.WithZone("")
	if addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() || addr.IsMulticast() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() || !addr.IsGlobalUnicast() {
		return false
	}
	for _, p := range refusedPrefixes {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// checkDial is the dialer's Control: it runs for every connection, after
// the name resolved, before the connect.
func checkDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, address)
	}
	if !PublicAddress(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, ap.Addr())
	}
	return nil
}

// Allowed reports whether endpoint starts with one of prefixes (the
// policy's push.allow_endpoints). A prefix matches only as a whole URL
// prefix: "http://127.0.0.1:" matches "http://127.0.0.1:8080/p".
func Allowed(endpoint string, prefixes []string) bool {
	for _, p := range prefixes {
		if p != "" && strings.HasPrefix(endpoint, p) {
			return true
		}
	}
	return false
}

// MaxEndpoint bounds an endpoint's length in bytes.
const MaxEndpoint = 2048

// ParseEndpoint checks an endpoint a client sent: an absolute http or
// https URL with a host, no user info, no fragment, at most MaxEndpoint
// bytes. https only unless allowed (an allow-list prefix matches it).
func ParseEndpoint(endpoint string, allowed bool) (*url.URL, error) {
	if endpoint == "" || len(endpoint) > MaxEndpoint {
		return nil, fmt.Errorf("endpoint must be 1–%d bytes", MaxEndpoint)
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return nil, errors.New("endpoint is not a URL")
	case u.Scheme != "https" && !(allowed && u.Scheme == "http"):
		return nil, errors.New("endpoint must be an https URL")
	case u.Host == "" || u.Hostname() == "" || u.Opaque != "":
		return nil, errors.New("endpoint has no host")
	case u.User != nil:
		return nil, errors.New("endpoint must not carry user info")
	case u.Fragment != "" || strings.Contains(endpoint, "#"):
		return nil, errors.New("endpoint must not carry a fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("endpoint has a bad port")
		}
	}
	for _, c := range endpoint {
		if c <= 0x20 || c >= 0x7f {
			return nil, errors.New("endpoint must be printable ASCII")
		}
	}
	return u, nil
}

// Topic is the Topic header of a conversation's pushes: a push service
// keeps only the latest undelivered message of one topic, and a hint of
// the latest seq covers the earlier ones. 32 base64url characters of a
// hash of the id (the header allows no more, and no other alphabet).
func Topic(conv string) string {
	sum := sha256.Sum256([]byte("parley push topic\x00" + conv))
	return base64.RawURLEncoding.EncodeToString(sum[:24])
}

// Message is one push to deliver.
type Message struct {
	Endpoint string
	P256DH   []byte // the user agent's public key, 65 bytes
	Auth     []byte // 16 bytes
	Payload  []byte // plaintext, at most MaxPayload bytes
	Topic    string
	TTL      time.Duration
	Urgency  string // "normal" when empty
	Key      *Key   // signs the request; nil: the Sender's Key
}

// Result is what a push service answered.
type Result int

// The outcomes of one delivery attempt.
const (
	Delivered Result = iota // 2xx
	Gone                    // 404 or 410: the subscription is no more; remove it
	Retry                   // 429, 5xx, a network error: try again later
	Failed                  // anything else (a refused address, 400, 403, 413, a redirect): do not retry
)

// Sender delivers push messages.
type Sender struct {
	// Key signs the requests (VAPID).
	Key *Key
	// Subject is the VAPID sub claim (DefaultSubject when empty).
	Subject func() string
	// Allow returns the policy's push.allow_endpoints in force.
	Allow func() []string
	// Now is the clock of the VAPID tokens (time.Now when nil).
	Now func() time.Time

	safe, open *http.Client
}

// NewSender returns a Sender with its two HTTP clients: the checked one,
// and the one for allowed endpoints. timeout bounds one request.
func NewSender(key *Key, timeout time.Duration) *Sender {
	mk := func(control func(string, string, syscall.RawConn) error) *http.Client {
		d := &net.Dialer{Timeout: timeout, Control: control}
		tr := &http.Transport{
			Proxy:               nil, // a proxy would make the dial check look at the proxy
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: timeout,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}
		return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return &Sender{Key: key, safe: mk(checkDial), open: mk(nil)}
}

// Send delivers m once and says what to do next; err tells why it was not
// Delivered (for the log), retryAfter is the push service's Retry-After
// when it gave one.
func (s *Sender) Send(ctx context.Context, m Message) (res Result, retryAfter time.Duration, err error) {
	var allow []string
	if s.Allow != nil {
		allow = s.Allow()
	}
	allowed := Allowed(m.Endpoint, allow)
	u, err := ParseEndpoint(m.Endpoint, allowed)
	if err != nil {
		return Failed, 0, err
	}
	req, err := s.request(ctx, u, m)
	if err != nil {
		return Failed, 0, err
	}
	client := s.safe
	if allowed {
		client = s.open
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, ErrRefusedAddress) {
			return Failed, 0, err
		}
		return Retry, 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return classify(resp)
}

func (s *Sender) request(ctx context.Context, u *url.URL, m Message) (*http.Request, error) {
	body, err := Encrypt(m.Payload, m.P256DH, m.Auth)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	subject := ""
	if s.Subject != nil {
		subject = s.Subject()
	}
	key := s.Key
	if m.Key != nil {
		key = m.Key
	}
	if key == nil {
		return nil, errors.New("webpush: no VAPID key")
	}
	auth, err := key.Authorization(u, subject, now())
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("TTL", strconv.Itoa(int(m.TTL/time.Second)))
	urgency := m.Urgency
	if urgency == "" {
		urgency = "normal"
	}
	req.Header.Set("Urgency", urgency)
	if m.Topic != "" {
		req.Header.Set("Topic", m.Topic)
	}
	return req, nil
}

// classify maps a push service's status to what to do next.
func classify(resp *http.Response) (Result, time.Duration, error) {
	code := resp.StatusCode
	var after time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		after = time.Duration(s) * time.Second
	}
	switch {
	case code >= 200 && code < 300:
		return Delivered, 0, nil
	case code == http.StatusNotFound || code == http.StatusGone:
		return Gone, 0, fmt.Errorf("push service: %s", resp.Status)
	case code == http.StatusTooManyRequests || code >= 500:
		return Retry, after, fmt.Errorf("push service: %s", resp.Status)
	}
	return Failed, 0, fmt.Errorf("push service: %s", resp.Status)
}
