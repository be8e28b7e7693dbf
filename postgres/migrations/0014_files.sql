-- Uploaded files and their links (postgres/file.go, file.go in the root).
-- Names match sqlite/migrations/0012_files.sql. Additive: servers of the
-- previous version keep working on this schema during a rolling upgrade
-- (they never attach files, and parley_send_many is unchanged).
--
-- files holds one row per upload, counted against its owner's quota from
-- its creation (uploading) until the collector deletes it. created_at is
-- the database clock, as events.created_at.
CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    size       BIGINT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('uploading', 'ready')),
    mime       TEXT NOT NULL DEFAULT '',
    sha256     TEXT NOT NULL DEFAULT '',
    width      INT NOT NULL DEFAULT 0,
    height     INT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
-- The quota sum and FileUsage read the index alone (size rides along).
CREATE INDEX files_by_owner ON files (owner) INCLUDE (size);
-- StaleFiles walks each state oldest first.
CREATE INDEX files_stale ON files (state, created_at);

-- One row per (file, message that attaches it), written in the send's
-- transaction and removed by the recall, purge or rollback that takes the
-- message away: what lets anyone but the owner read a file (File), by the
-- link's seq against the reader's periods.
CREATE TABLE file_links (
    file_id TEXT   NOT NULL,
    conv_id TEXT   NOT NULL,
    seq     BIGINT NOT NULL,
    PRIMARY KEY (file_id, conv_id, seq)
);
-- Recall, purge and rollback find a message's links by its seq.
CREATE INDEX file_links_by_event ON file_links (conv_id, seq);

-- A message's attachments as parley.EncodeAttachments writes them (a JSON
-- array), NULL for none. Rollback rebuilds links from the messages that
-- have some, over the partial index.
ALTER TABLE events ADD COLUMN attachments TEXT;
CREATE INDEX events_attachments ON events (conv_id, seq) WHERE attachments IS NOT NULL;

-- parley_recall as in migration 0013, and the recall deletes the target's
-- file links: nobody but the owner reads a recalled message's files from
-- the recall's commit on. Same signature: servers of the previous version
-- call this one as well.
CREATE OR REPLACE FUNCTION parley_recall(p_conv TEXT, p_user TEXT, p_device TEXT, p_cmid TEXT,
    p_hash BYTEA, p_mid TEXT, p_target BIGINT, p_window_us BIGINT)
RETURNS TABLE (outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA, o_epoch BIGINT,
    t_kind TEXT, t_sender TEXT, t_recalled BOOLEAN, t_expired BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
    c_next BIGINT;
    v_at TIMESTAMPTZ;
BEGIN
    SELECT c.next_seq, c.epoch INTO c_next, o_epoch
    FROM conversations c WHERE c.id = p_conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        outcome := 4;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT e.seq, e.mid, e.kind, e.request_hash INTO o_seq, o_mid, o_kind, o_hash
    FROM events e WHERE e.conv_id = p_conv AND e.sender_user = p_user AND e.cmid = p_cmid;
    IF FOUND THEN
        outcome := 1;
    ELSIF EXISTS (SELECT 1 FROM tombstones t
            WHERE t.conv_id = p_conv AND t.sender_user = p_user AND t.cmid = p_cmid) THEN
        outcome := 2;
    ELSIF NOT EXISTS (SELECT 1 FROM periods p
            WHERE p.conv_id = p_conv AND p.user_id = p_user AND p.to_seq IS NULL) THEN
        outcome := 3;
    ELSE
        SELECT tg.kind, tg.sender_user, tg.recall_seq IS NOT NULL,
            clock_timestamp() > tg.created_at + p_window_us * interval '1 microsecond'
        INTO t_kind, t_sender, t_recalled, t_expired
        FROM events tg WHERE tg.conv_id = p_conv AND tg.seq = p_target;
        IF NOT FOUND OR t_kind <> 'message' OR t_sender <> p_user OR t_recalled OR t_expired THEN
            outcome := 5;
        ELSE
            INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, target)
            VALUES (p_conv, c_next, p_mid, 'recall', p_user, p_device, p_cmid, p_hash, p_target)
            RETURNING created_at INTO v_at;
            UPDATE events SET recall_seq = c_next WHERE conv_id = p_conv AND seq = p_target;
            -- Over events_targets: the target's edits.
            UPDATE events SET recall_seq = c_next
            WHERE conv_id = p_conv AND target = p_target AND kind = 'edit';
            DELETE FROM search_docs WHERE conv_id = p_conv AND seq = p_target;
            -- Over file_links_by_event.
            DELETE FROM file_links WHERE conv_id = p_conv AND seq = p_target;
            UPDATE conversations SET next_seq = c_next + 1, last_at = v_at WHERE id = p_conv;
            outcome := 0;
            o_seq := c_next;
            o_mid := p_mid;
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
