-- Full-text search (postgres/search.go, search.go in the root). Names match
-- sqlite/migrations/0011_search.sql.
--
-- search_docs holds one row per version of a message's text: the original
-- (vseq = seq) and each edit (vseq = the edit event's seq). sender_user is
-- the message's sender and at the message's time in Unix milliseconds,
-- truncated as Event.At is read back, for every version: results are
-- ordered by the message. tsv is built in Go from parley.SearchDocTokens
-- and cast from its literal (never to_tsvector: no parser, no locale, no
-- stemming), so both stores index exactly the same tokens at the same
-- positions. The rows are written in the transaction of the event that
-- causes them: send, edit, recall, purge, rollback.
CREATE TABLE search_docs (
    conv_id     TEXT     NOT NULL,
    seq         BIGINT   NOT NULL,
    vseq        BIGINT   NOT NULL,
    sender_user TEXT     NOT NULL,
    at          BIGINT   NOT NULL,
    tsv         TSVECTOR NOT NULL,
    PRIMARY KEY (conv_id, seq, vseq)
);
CREATE INDEX search_docs_tsv ON search_docs USING gin (tsv);

-- Conversations whose index is not built: a search that touches one
-- answers UNAVAILABLE until RebuildSearch clears it. Every conversation
-- with a message now is one (its messages predate the index); new
-- conversations never are.
CREATE TABLE search_pending (conv_id TEXT PRIMARY KEY);
INSERT INTO search_pending (conv_id)
SELECT c.id FROM conversations c
WHERE EXISTS (SELECT 1 FROM events e WHERE e.conv_id = c.id AND e.kind = 'message');

-- parley_send_many as in migration 0008, with p_tsvs: item i's tsvector
-- literal, whose search_docs row is inserted with the event it stores (a
-- replay or a refused item writes none). The send stays one statement, one
-- round trip. An item without a literal (NULL) marks its conversation
-- pending instead: that is what the previous version's call below does.
CREATE FUNCTION parley_send_many(p_convs TEXT[], p_users TEXT[], p_devices TEXT[], p_cmids TEXT[],
    p_hashes BYTEA[], p_bodies TEXT[], p_mids TEXT[], p_tsvs TEXT[])
RETURNS TABLE (o_item INT, outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA,
    o_epoch BIGINT, o_at TIMESTAMPTZ)
LANGUAGE plpgsql AS $$
DECLARE
    l_ids TEXT[];
    l_next BIGINT[];
    l_epoch BIGINT[];
    l_n BIGINT[];
    l_at TIMESTAMPTZ[];
    j INT;
BEGIN
    -- The locking clause sits above the sort: rows are locked in id order.
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.next_seq), '{}'), coalesce(array_agg(l.epoch), '{}')
    INTO l_ids, l_next, l_epoch
    FROM (SELECT c.id, c.next_seq, c.epoch FROM conversations c
        WHERE c.id = ANY (p_convs) ORDER BY c.id COLLATE "C" FOR NO KEY UPDATE) l;
    l_n := array_fill(0::BIGINT, ARRAY[cardinality(l_ids)]);
    l_at := array_fill(NULL::TIMESTAMPTZ, ARRAY[cardinality(l_ids)]);
    FOR i IN 1 .. cardinality(p_users) LOOP
        o_item := i - 1;
        o_seq := NULL; o_mid := NULL; o_kind := NULL; o_hash := NULL; o_epoch := NULL; o_at := NULL;
        j := array_position(l_ids, p_convs[i]);
        IF j IS NULL THEN
            outcome := 4;
            RETURN NEXT;
            CONTINUE;
        END IF;
        o_epoch := l_epoch[j];
        SELECT e.seq, e.mid, e.kind, e.request_hash INTO o_seq, o_mid, o_kind, o_hash
        FROM events e WHERE e.conv_id = p_convs[i] AND e.sender_user = p_users[i] AND e.cmid = p_cmids[i];
        IF FOUND THEN
            outcome := 1;
        ELSIF EXISTS (SELECT 1 FROM tombstones t
                WHERE t.conv_id = p_convs[i] AND t.sender_user = p_users[i] AND t.cmid = p_cmids[i]) THEN
            outcome := 2;
        ELSIF NOT EXISTS (SELECT 1 FROM periods p
                WHERE p.conv_id = p_convs[i] AND p.user_id = p_users[i] AND p.to_seq IS NULL) THEN
            outcome := 3;
        ELSE
            o_seq := l_next[j] + l_n[j];
            INSERT INTO events (conv_id, seq, mid, kind, sender_user, sender_device, cmid, request_hash, body)
            VALUES (p_convs[i], o_seq, p_mids[i], 'message', p_users[i], p_devices[i], p_cmids[i], p_hashes[i], p_bodies[i])
            RETURNING created_at INTO o_at;
            IF p_tsvs[i] IS NULL THEN
                INSERT INTO search_pending (conv_id) VALUES (p_convs[i]) ON CONFLICT DO NOTHING;
            ELSE
                INSERT INTO search_docs (conv_id, seq, vseq, sender_user, at, tsv)
                VALUES (p_convs[i], o_seq, o_seq, p_users[i], floor(extract(epoch FROM o_at) * 1000)::BIGINT,
                    p_tsvs[i]::TSVECTOR);
            END IF;
            outcome := 0;
            o_mid := p_mids[i];
            l_n[j] := l_n[j] + 1;
            l_at[j] := o_at;
        END IF;
        RETURN NEXT;
    END LOOP;
    UPDATE conversations c SET next_seq = u.next_seq + u.n, last_at = u.last_at
    FROM unnest(l_ids, l_next, l_n, l_at) AS u (id, next_seq, n, last_at)
    WHERE c.id = u.id AND u.n > 0;
END
$$;

-- The previous version's parley_send_many, for its servers during a
-- rolling upgrade: the same sends, with no tokens (it cannot make them),
-- so the conversations they write to are marked pending and answer
-- UNAVAILABLE to searches until rebuilt, rather than silently missing
-- messages. (Its edits and replies, written by statements of its own,
-- are not indexed until a rebuild either.)
CREATE OR REPLACE FUNCTION parley_send_many(p_convs TEXT[], p_users TEXT[], p_devices TEXT[], p_cmids TEXT[],
    p_hashes BYTEA[], p_bodies TEXT[], p_mids TEXT[])
RETURNS TABLE (o_item INT, outcome SMALLINT, o_seq BIGINT, o_mid TEXT, o_kind TEXT, o_hash BYTEA,
    o_epoch BIGINT, o_at TIMESTAMPTZ)
LANGUAGE sql AS $$
    SELECT * FROM parley_send_many(p_convs, p_users, p_devices, p_cmids, p_hashes, p_bodies, p_mids, NULL::TEXT[])
$$;

-- parley_recall as in migration 0009, and the recall deletes every
-- search_docs row of the target (each version): recalled text leaves the
-- index in the recall's transaction. Same signature: servers of the
-- previous version call this one as well.
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
            UPDATE conversations SET next_seq = c_next + 1, last_at = v_at WHERE id = p_conv;
            outcome := 0;
            o_seq := c_next;
            o_mid := p_mid;
        END IF;
    END IF;
    RETURN NEXT;
END
$$;
