-- The search index's queue (postgres/search.go, searchqueue.go). A new
-- message's index row was written in its send's transaction and cost the
-- send as much write-ahead log again as the message itself (the heap row,
-- its GIN pending-list entries, the primary key and the walk index). A
-- send now writes one row here instead, a heap row with no index at all,
-- and the store's mover moves queued rows into search_docs after the
-- commit, in batches, each batch one statement: deleted here and inserted
-- there in one transaction, so a row is never lost and never indexed
-- twice, and a mover that stops (a crash, a shutdown) leaves its rows here
-- for the next one. Several servers' movers share the queue, one at a time.
--
-- Only originals are queued (the version's seq is the message's seq):
-- an edit writes its search_docs row in its transaction as before, so the
-- newer version that hides a row (rule 2) is always in search_docs, and
-- the indexed path's checks never need to read the queue. A search
-- matches the queued rows of the caller's conversations with the same
-- tsquery and the same filter, and merges them with the indexed hits (a
-- row is in one place or the other in any snapshot). A recall, purge,
-- rollback or rebuild deletes queued rows before indexed ones.
--
-- No index: every index on it would cost the send what the queue saves,
-- and the queue holds a few hundred rows, read whole by a search. The
-- mover vacuums it, so its dead rows do not pile up between autovacuums.
CREATE TABLE search_queue (
    conv_id     TEXT     NOT NULL,
    seq         BIGINT   NOT NULL,
    sender_user TEXT     NOT NULL,
    at          BIGINT   NOT NULL,
    tsv         TSVECTOR NOT NULL
);

-- parley_send_many as in migrations 0013 and 0014, with each new
-- message's row queued instead of indexed. Same signature: servers of the
-- previous version, which call it too, queue as well (and move nothing: a
-- server of this version does).
CREATE OR REPLACE FUNCTION parley_send_many(p_convs TEXT[], p_users TEXT[], p_devices TEXT[], p_cmids TEXT[],
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
                INSERT INTO search_queue (conv_id, seq, sender_user, at, tsv)
                VALUES (p_convs[i], o_seq, p_users[i], floor(extract(epoch FROM o_at) * 1000)::BIGINT,
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


-- parley_recall as in migration 0014, and the recall deletes the target's
-- queued row too. Same signature.
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
            -- The queue first: a row the mover holds is waited for, and the
            -- next statement, on a snapshot of its own, sees where it went.
            DELETE FROM search_queue WHERE conv_id = p_conv AND seq = p_target;
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
