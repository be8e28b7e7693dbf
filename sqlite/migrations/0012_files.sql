-- Uploaded files and their links (sqlite/file.go, file.go in the root).
-- Names match postgres/migrations/0014_files.sql.
--
-- files holds one row per upload, counted against its owner's quota from
-- its creation (uploading) until the collector deletes it. created_at is
-- the database clock in Unix milliseconds, as events.created_at.
CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('uploading', 'ready')),
    mime       TEXT NOT NULL DEFAULT '',
    sha256     TEXT NOT NULL DEFAULT '',
    width      INTEGER NOT NULL DEFAULT 0,
    height     INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
) STRICT;
-- The quota sum and FileUsage read the index alone (size rides along).
CREATE INDEX files_by_owner ON files (owner, size);
-- StaleFiles walks each state oldest first.
CREATE INDEX files_stale ON files (state, created_at);

-- One row per (file, message that attaches it), written in the send's
-- transaction and removed by the recall, purge or rollback that takes the
-- message away: what lets anyone but the owner read a file (File), by the
-- link's seq against the reader's periods.
CREATE TABLE file_links (
    file_id TEXT NOT NULL,
    conv_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (file_id, conv_id, seq)
) STRICT;
-- Recall, purge and rollback find a message's links by its seq.
CREATE INDEX file_links_by_event ON file_links (conv_id, seq);

-- A message's attachments as parley.EncodeAttachments writes them (a JSON
-- array), NULL for none. Rollback rebuilds links from the messages that
-- have some, over the partial index.
ALTER TABLE events ADD COLUMN attachments TEXT;
CREATE INDEX events_attachments ON events (conv_id, seq) WHERE attachments IS NOT NULL;
