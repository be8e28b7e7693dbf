package middleware

// ParseHop and IsTrusted expose the hop grammar and the trust test to the
// black-box fuzz target, which checks ClientAddr's result against them.
var (
	ParseHop  = parseHop
	IsTrusted = isTrusted
)

// IndexConsistent exposes the Identifier's user-index check to the
// concurrency test.
func IndexConsistent(i *Identifier) bool { return i.indexConsistent() }
