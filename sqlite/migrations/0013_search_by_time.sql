-- The search index keyed by time (sqlite/search.go): a row's id is its
-- message's time in milliseconds shifted left by 20 bits, plus a slot
-- counting the versions indexed in that millisecond, so FTS5, which
-- yields its matches in rowid order, walks them newest first and a search
-- stops after a page instead of sorting every match.
--
-- The ids of the rows already written cannot be changed in place: the
-- FTS5 table is contentless (its rows' terms are not stored), so both
-- tables are made again, empty, and every conversation that has a message
-- is marked not built. Searches over them answer UNAVAILABLE until
-- `parley search rebuild` or the server's rebuild at start has rebuilt
-- them from the events.
DROP TABLE search_fts;
DROP TABLE search_docs;

-- As in 0011, without AUTOINCREMENT (the store gives the ids: indexDocs)
-- and without the index on (conv_id, seq, vseq): every version of a
-- message is indexed at the message's time, so its rows are found by the
-- id range of that millisecond, from the message's event (which is there
-- as long as its rows are: unindex). Writing that index cost a send a
-- page per conversation of its batch, as much as the rest of the index.
CREATE TABLE search_docs (
    id          INTEGER PRIMARY KEY,
    conv_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    vseq        INTEGER NOT NULL,
    sender_user TEXT NOT NULL,
    at          INTEGER NOT NULL
) STRICT;

-- The ids of rows whose event had left the log before the row was
-- deleted (an index out of step with its log): their FTS5 entries could
-- not be deleted, so no new row may take their id.
CREATE TABLE search_lost (
    id INTEGER PRIMARY KEY
) STRICT;

-- The versions written since the last flush, with their terms: a send or
-- an edit writes its docs row and a row here in its transaction, and the
-- writer moves the queue into search_fts in one statement once it holds
-- enough rows (FTS5 writes a segment per transaction, which cost a send
-- as much again as the send itself). A search matches the queued rows by
-- their terms itself; a recall, purge or rollback deletes them here.
CREATE TABLE search_queue (
    id    INTEGER PRIMARY KEY,
    terms TEXT NOT NULL
) STRICT;

-- As in 0011, plus columnsize=0: no row of token counts per row (they
-- serve ranking by relevance, which search does not do).
CREATE VIRTUAL TABLE search_fts USING fts5(terms, content='', tokenize='ascii', columnsize=0);
INSERT INTO search_fts (search_fts, rank) VALUES ('secure-delete', 1);

INSERT OR IGNORE INTO search_pending (conv_id) SELECT DISTINCT conv_id FROM events WHERE kind = 'message';
