-- Search walks the caller's index rows newest first (postgres/search.go,
-- searchWalkSQL): a common word fills a page after a few dozen rows
-- instead of after reading every one of its matches. The index holds the
-- order of results (the message's time, conversation id in byte order,
-- seq) and the version, so the walk reads it alone and skips the rows of
-- other conversations without reading them.
CREATE INDEX search_docs_at ON search_docs (at, conv_id COLLATE "C", seq, vseq);
