-- Full-text search, SQLite dialect (search.go in the root package). Names
-- match postgres/migrations/0013_search.sql where both have the table.

-- One row per version of a message's text: the original (vseq = seq) and
-- each edit (vseq = the edit's seq). seq, sender_user and at are the
-- message's (at: its time, Unix milliseconds), so every version sorts at
-- its message's place. Written in the transaction of the send or edit;
-- recall, purge and rollback delete or rebuild them in theirs.
-- AUTOINCREMENT: an id is never given twice, so index entries left behind
-- by a row whose event had vanished (see below) can never match a new row.
CREATE TABLE search_docs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    conv_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    vseq        INTEGER NOT NULL,
    sender_user TEXT NOT NULL,
    at          INTEGER NOT NULL,
    UNIQUE (conv_id, seq, vseq)
) STRICT;

-- The text index: rowid = search_docs.id, terms = parley.SearchDocTokens
-- joined by one space. The ascii tokenizer splits on ASCII characters that
-- are not letters or digits only and keeps every other code point, so each
-- of those tokens is exactly one FTS5 token at its position.
--
-- Contentless (the text is not stored twice). A row is deleted with FTS5's
-- 'delete' command, which names the row's terms: the store computes them
-- again from the version's event (its body is immutable in the log) and
-- the docs row (conversation, sender). With secure-delete on, such a
-- delete takes the tokens out of the index's pages at once, so a recalled
-- message's text leaves no trace in the index. (contentless_delete=1 would
-- allow a plain DELETE but only writes a tombstone: the tokens stay in the
-- pages until a merge reaches them, secure-delete or not.)
--
-- A change of parley.SearchTokens therefore needs a migration that empties
-- both tables ('delete-all') and marks every conversation pending: deletes
-- must name the tokens the rows were written with.
CREATE VIRTUAL TABLE search_fts USING fts5(terms, content='', tokenize='ascii');
INSERT INTO search_fts (search_fts, rank) VALUES ('secure-delete', 1);

-- Conversations whose index is not built: a search that touches one
-- answers UNAVAILABLE until RebuildSearch clears it. Every conversation
-- that has a message now is one (its messages predate the index).
CREATE TABLE search_pending (
    conv_id TEXT PRIMARY KEY
) STRICT;
INSERT INTO search_pending (conv_id) SELECT DISTINCT conv_id FROM events WHERE kind = 'message';
