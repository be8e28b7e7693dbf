// Package export writes chat-history exports (docs/design.md) and serves their
// downloads. The store (parley.Exports) keeps the jobs, their durable
// snapshots and the shard records; this package owns the files.
//
// # Files
//
// Everything lives in one directory (Options.Dir, Download.Dir):
//
//	<job>.jsonl.gz          the artifact (ArtifactPath), present once the job is done
//	<job>.jsonl.gz.tmp-*    an artifact being written
//	<job>.files.zip         the files archive (FilesPath, files.go), when the lines attach files
//	<job>.files.zip.tmp-*   a files archive being written
//	<job>.shards/000000.jsonl  shard 0 of a running job (and *.tmp-* while written)
//
// Every file is written to a temp file in its final directory, fsynced
// and renamed (the artifact's directory is fsynced too), so a crash leaves
// either the old name, the complete new file, or a stale temp file the
// janitor deletes: never a partial file under a final name. A shard is
// recorded only once its file is in place.
//
// # Determinism
//
// A shard holds ExportShardSize message events of one conversation as
// JSONL, one line per event with sorted keys and nothing of the run (no
// host, no wall clock): the same snapshot always gives the same bytes. A
// message carries its edits, reactions and replies as the exporting user
// could see them at the snapshot (parley.Decorate as of the snapshot head,
// over the events inside the recorded periods), so later activity never
// changes a shard.
// The artifact is the shards in order, gzip-compressed at a fixed level
// with a zero header (no name, mtime 0), so a rerun after any crash gives
// the same sha256, which is the download's strong ETag.
package export

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// File name parts. A job id never holds a dot (parley.CheckExportID), so
// the part before the first dot of a name in the directory is its job.
const (
	artifactSuffix = ".jsonl.gz"
	shardsSuffix   = ".shards"
	tmpInfix       = ".tmp-"
	shardExt       = ".jsonl"
)

// ArtifactPath is where a job's artifact lives in dir.
func ArtifactPath(dir, job string) string {
	return filepath.Join(dir, job+artifactSuffix)
}

// shardDir is the directory of a job's shards in dir.
func shardDir(dir, job string) string {
	return filepath.Join(dir, job+shardsSuffix)
}

// shardPath is the file of shard idx of a job.
func shardPath(dir, job string, idx int) string {
	return filepath.Join(shardDir(dir, job), fmt.Sprintf("%06d%s", idx, shardExt))
}

// timeFormat is RFC 3339 in UTC with milliseconds, the stores' precision.
const timeFormat = "2006-01-02T15:04:05.000Z"

// encodeShard returns the JSONL bytes of a shard's events.
func encodeShard(evs []parley.Event) ([]byte, error) {
	buf := make([]byte, 0, len(evs)*256) // a line is ~260 bytes with a 60–90 byte body
	for _, ev := range evs {
		buf = appendLine(buf, ev)
	}
	return buf, nil
}

// appendLine appends ev's line and a newline: exactly what a json.Encoder
// with SetEscapeHTML(false) writes for its line (the bytes of shards
// recorded by earlier versions must come out the same;
// TestAppendLineMatchesJSON holds the two together), without reflection,
// which was a third of a shard's encoding time.
//
// Keys are in sorted order. The fields of derived state (edit_seq,
// edited_at, last_reply_seq, reactions, replies) and of replies and
// mentions (reply_to, mentions) and the attachments are left out when
// empty, so the line of a plain message keeps the bytes it had before they
// existed. A message recalled at the snapshot lists no attachments.
func appendLine(b []byte, ev parley.Event) []byte {
	var d parley.Derived
	if ev.Derived != nil {
		d = *ev.Derived
	}
	b = append(b, `{"at":"`...)
	b = ev.At.UTC().AppendFormat(b, timeFormat)
	b = append(b, '"')
	if !ev.Recalled {
		b = appendAttachments(b, ev.Attachments)
	}
	b = append(b, `,"body":`...)
	b = appendJSONString(b, ev.Body)
	b = append(b, `,"conv":`...)
	b = appendJSONString(b, ev.Conv)
	b = append(b, `,"device":`...)
	b = appendJSONString(b, ev.Device)
	if d.EditSeq != 0 {
		b = append(b, `,"edit_seq":`...)
		b = strconv.AppendInt(b, d.EditSeq, 10)
		b = append(b, `,"edited_at":"`...)
		b = d.EditedAt.UTC().AppendFormat(b, timeFormat)
		b = append(b, '"')
	}
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(ev.Kind))
	if d.LastReplySeq != 0 {
		b = append(b, `,"last_reply_seq":`...)
		b = strconv.AppendInt(b, d.LastReplySeq, 10)
	}
	if len(ev.Mentions) > 0 {
		b = append(b, `,"mentions":[`...)
		for i, m := range ev.Mentions {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m)
		}
		b = append(b, ']')
	}
	b = append(b, `,"mid":`...)
	b = appendJSONString(b, ev.MID)
	b = appendReactions(b, d.Reactions)
	b = append(b, `,"recalled":`...)
	b = strconv.AppendBool(b, ev.Recalled)
	if d.Replies != 0 {
		b = append(b, `,"replies":`...)
		b = strconv.AppendInt(b, d.Replies, 10)
	}
	if ev.ReplyTo != 0 {
		b = append(b, `,"reply_to":`...)
		b = strconv.AppendInt(b, ev.ReplyTo, 10)
	}
	b = append(b, `,"sender":`...)
	b = appendJSONString(b, ev.Sender)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	return append(b, "}\n"...)
}

// appendAttachments appends the attachments member (keys sorted: height,
// id, mime, name, sha256, size, width; the pixel sizes only when known),
// in the message's order; nothing when there are none.
func appendAttachments(b []byte, as []parley.Attachment) []byte {
	if len(as) == 0 {
		return b
	}
	b = append(b, `,"attachments":[`...)
	for i, a := range as {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if a.Height != 0 {
			b = append(b, `"height":`...)
			b = strconv.AppendInt(b, int64(a.Height), 10)
			b = append(b, ',')
		}
		b = append(b, `"id":`...)
		b = appendJSONString(b, a.ID)
		b = append(b, `,"mime":`...)
		b = appendJSONString(b, a.MIME)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, a.Name)
		b = append(b, `,"sha256":`...)
		b = appendJSONString(b, a.SHA256)
		b = append(b, `,"size":`...)
		b = strconv.AppendInt(b, a.Size, 10)
		if a.Width != 0 {
			b = append(b, `,"width":`...)
			b = strconv.AppendInt(b, int64(a.Width), 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendReactions appends the reactions member (keys sorted: count,
// emoji, me), nothing when there are none.
func appendReactions(b []byte, rs []parley.Reaction) []byte {
	if len(rs) == 0 {
		return b
	}
	b = append(b, `,"reactions":[`...)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"count":`...)
		b = strconv.AppendInt(b, r.Count, 10)
		b = append(b, `,"emoji":`...)
		b = appendJSONString(b, r.Emoji)
		b = append(b, `,"me":`...)
		b = strconv.AppendBool(b, r.Me)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendJSONString appends s as a JSON string the way encoding/json does
// without HTML escaping: '"' and '\\' escaped, \b \f \n \r \t short,
// other control characters as \u00XX, invalid UTF-8 as \ufffd, U+2028
// and U+2029 escaped, everything else as it is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileSum returns the sha256 (hex) and size of a file, streaming it.
func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeError is a failed file write: the disk is full, the directory is
// gone, fsync failed. The job is retried after a backoff.
type writeError struct {
	op   string
	path string
	err  error
}

func (e *writeError) Error() string { return "export: " + e.op + " " + e.path + ": " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func wrapWrite(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var we *writeError
	if errors.As(err, &we) {
		return err
	}
	return &writeError{op: op, path: path, err: err}
}

// syncDir fsyncs a directory, so the names created or renamed in it
// survive a power cut.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return wrapWrite("open dir", dir, err)
	}
	defer d.Close()
	return wrapWrite("fsync dir", dir, d.Sync())
}

// parseName splits a directory entry of the export directory into its job
// and what it is; ok is false for names this package does not write.
func parseName(name string) (job, kind string, ok bool) {
	job, rest, found := strings.Cut(name, ".")
	if !found || parley.CheckExportID(job) != nil {
		return "", "", false
	}
	rest = "." + rest
	switch {
	case rest == artifactSuffix:
		return job, kindArtifact, true
	case strings.HasPrefix(rest, artifactSuffix+tmpInfix):
		return job, kindTemp, true
	case rest == shardsSuffix:
		return job, kindShards, true
	case rest == filesSuffix:
		return job, kindFiles, true
	case strings.HasPrefix(rest, filesSuffix+tmpInfix):
		return job, kindTemp, true
	}
	return "", "", false
}

const (
	kindArtifact = "artifact"
	kindTemp     = "temp"
	kindShards   = "shards"
	kindFiles    = "files"
)
