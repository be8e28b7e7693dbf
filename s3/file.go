// Package s3 keeps blobs in an S3-compatible bucket (parley.BlobStore),
// through github.com/minio/minio-go/v7: Amazon S3, MinIO, Versity's
// gateway, Ceph, Garage and the like.
//
// A store is named by a URL; the credentials come from the environment,
// never the URL, so they stay out of flags, logs and process lists:
//
//	s3://BUCKET[/PREFIX]?endpoint=HOST:PORT&region=REGION&secure=false
//
//	endpoint  the server (default s3.amazonaws.com)
//	region    the bucket's region (default: asked of the server)
//	secure    https unless "false"
//	PREFIX    a folder of the bucket that holds the blobs (default: the
//	          whole bucket), so one bucket may serve several deployments
//
//	PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY, or else
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)
//
// Buckets are addressed path-style (http://HOST/BUCKET/KEY), which every
// S3-compatible server answers. The bucket must exist: the store creates
// nothing.
//
// Memory: a Put holds at most SinglePut bytes of its reader plus one part
// of PartSize; a PutFile reads its file in place (each part a section of
// the file) and holds no part; a reader streams the response body.
package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parleychat/parley"
)

var _ parley.BlobStore = (*Store)(nil)

const (
	// SinglePut is the largest blob a Put sends in one request; a larger
	// one goes as a multipart upload, which costs two more requests.
	SinglePut = 1 << 20
	// PartSize is the size of each part of a multipart upload: the memory
	// a Put of unknown length buffers (S3 accepts no part below 5 MiB but
	// the last), and a bound of 10,000 parts × 8 MiB = 78 GiB per blob.
	PartSize = 8 << 20
)

// Store is a parley.BlobStore in an S3 bucket. It is safe for concurrent
// use, by several processes too: every write is one S3 request or one
// multipart upload, which the server makes visible at once.
type Store struct {
	client *minio.Client
	bucket string
	prefix string // "" or a folder ending in "/"
}

// Open returns the store of rawURL (see the package documentation),
// reading the credentials with getenv, and checks that the bucket exists
// and the credentials are accepted.
func Open(ctx context.Context, rawURL string, getenv func(string) string) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	creds, err := credentialsFrom(getenv)
	if err != nil {
		return nil, err
	}
	client, err := minio.New(cfg.endpoint, &minio.Options{
		Creds:        creds,
		Secure:       cfg.secure,
		Region:       cfg.region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	s := &Store{client: client, bucket: cfg.bucket, prefix: cfg.prefix}
	ok, err := client.BucketExists(ctx, s.bucket)
	if err != nil {
		return nil, fmt.Errorf("s3: bucket %s at %s: %w", s.bucket, cfg.endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("s3: bucket %s does not exist at %s: create it first", s.bucket, cfg.endpoint)
	}
	return s, nil
}

type config struct {
	bucket, prefix, endpoint, region string
	secure                           bool
}

func parseURL(rawURL string) (config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return config{}, fmt.Errorf("s3: %w", err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.Opaque != "" {
		return config{}, errors.New("s3: want s3://BUCKET[/PREFIX]?endpoint=HOST:PORT")
	}
	if u.User != nil {
		return config{}, errors.New("s3: credentials do not belong in the URL: set PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY")
	}
	cfg := config{bucket: u.Host, endpoint: "s3.amazonaws.com", secure: true}
	if p := strings.Trim(u.Path, "/"); p != "" {
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return config{}, fmt.Errorf("s3: bad prefix %q", u.Path)
			}
		}
		cfg.prefix = p + "/"
	}
	for name, values := range u.Query() {
		v := values[len(values)-1]
		switch name {
		case "endpoint":
			cfg.endpoint = v
		case "region":
			cfg.region = v
		case "secure":
			switch v {
			case "true":
				cfg.secure = true
			case "false":
				cfg.secure = false
			default:
				return config{}, fmt.Errorf("s3: secure=%q: want true or false", v)
			}
		default:
			return config{}, fmt.Errorf("s3: unknown parameter %q (known: endpoint, region, secure)", name)
		}
	}
	return cfg, nil
}

func credentialsFrom(getenv func(string) string) (*credentials.Credentials, error) {
	if id, secret := getenv("PARLEY_S3_ACCESS_KEY"), getenv("PARLEY_S3_SECRET_KEY"); id != "" || secret != "" {
		if id == "" || secret == "" {
			return nil, errors.New("s3: set both PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY")
		}
		return credentials.NewStaticV4(id, secret, ""), nil
	}
	if id, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		return credentials.NewStaticV4(id, secret, getenv("AWS_SESSION_TOKEN")), nil
	}
	return nil, errors.New("s3: no credentials: set PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
}

// name returns the object name of key.
func (s *Store) name(key string) string { return s.prefix + key }

// putOptions bound the parts: minio-go's default part for a stream of
// unknown length is sized for 5 TiB (over 500 MiB of memory per upload).
func putOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{PartSize: PartSize, ContentType: "application/octet-stream"}
}

// Put implements parley.BlobStore. A blob of at most SinglePut bytes is one
// PUT; a larger one a multipart upload that the server shows only when it
// is complete, and that minio-go aborts when the reader or ctx fails.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if err := parley.ValidBlobKey(key); err != nil {
		return 0, sum, err
	}
	src := &hashingReader{r: r, ctx: ctx, h: sha256.New()}
	head := make([]byte, SinglePut)
	n, err := io.ReadFull(src, head)
	var body io.Reader
	size := int64(-1)
	switch err {
	case io.EOF, io.ErrUnexpectedEOF:
		body, size = bytes.NewReader(head[:n]), int64(n)
	case nil:
		body = io.MultiReader(bytes.NewReader(head), src)
	default:
		return 0, sum, err
	}
	if _, err := s.client.PutObject(ctx, s.bucket, s.name(key), body, size, putOptions()); err != nil {
		return 0, sum, fmt.Errorf("s3: put %s: %w", key, err)
	}
	src.h.Sum(sum[:0])
	return src.n, sum, nil
}

// hashingReader counts and hashes what it reads, and stops when ctx is
// done.
type hashingReader struct {
	r   io.Reader
	ctx context.Context
	h   hash.Hash
	n   int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	if err := h.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// PutFile implements parley.BlobStore: the file is uploaded from where it
// lies (parts of PartSize, read in place, several at a time), then removed.
func (s *Store) PutFile(ctx context.Context, key, path string) error {
	if err := parley.ValidBlobKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("s3: put file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("s3: put file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("s3: put file: %s is not a regular file", path)
	}
	if _, err := s.client.PutObject(ctx, s.bucket, s.name(key), f, info.Size(), putOptions()); err != nil {
		return fmt.Errorf("s3: put file %s: %w", key, err)
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("s3: put file %s: stored, but the source stays: %w", key, err)
	}
	return nil
}

// Open implements parley.BlobStore. The reader is minio-go's Object: the
// first call asks for the object's size and ETag, each later Read or Seek
// streams a range with If-Match on that ETag, so a replaced blob makes the
// read fail instead of mixing two blobs.
func (s *Store) Open(ctx context.Context, key string) (io.ReadSeekCloser, parley.Blob, error) {
	if err := parley.ValidBlobKey(key); err != nil {
		return nil, parley.Blob{}, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, parley.Blob{}, s.failed("open", key, err)
	}
	info, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, parley.Blob{}, s.failed("open", key, err)
	}
	return obj, parley.Blob{Key: key, Size: info.Size, ModTime: info.LastModified}, nil
}

// Stat implements parley.BlobStore.
func (s *Store) Stat(ctx context.Context, key string) (parley.Blob, error) {
	if err := parley.ValidBlobKey(key); err != nil {
		return parley.Blob{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.name(key), minio.StatObjectOptions{})
	if err != nil {
		return parley.Blob{}, s.failed("stat", key, err)
	}
	return parley.Blob{Key: key, Size: info.Size, ModTime: info.LastModified}, nil
}

// Delete implements parley.BlobStore. S3 answers a missing key with
// success already.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := parley.ValidBlobKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.name(key), minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("s3: delete %s: %w", key, err)
	}
	return nil
}

// List implements parley.BlobStore: one ListObjectsV2 page (1,000 keys) at
// a time. Objects under the prefix that are not valid keys (put there by
// something else) are skipped.
func (s *Store) List(ctx context.Context, prefix string, fn func(parley.Blob) error) error {
	if err := parley.ValidBlobPrefix(prefix); err != nil {
		return err
	}
	// Cancelled on return, so an early stop ends minio-go's lister too.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range s.client.ListObjects(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("s3: list: %w", obj.Err)
		}
		key := strings.TrimPrefix(obj.Key, s.prefix)
		if parley.ValidBlobKey(key) != nil {
			continue
		}
		if err := fn(parley.Blob{Key: key, Size: obj.Size, ModTime: obj.LastModified}); err != nil {
			return err
		}
	}
	// The lister ends its channel quietly when ctx is done.
	return ctx.Err()
}

// failed translates a missing key into parley.ErrBlobNotFound.
func (s *Store) failed(op, key string, err error) error {
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return parley.ErrBlobNotFound
	}
	return fmt.Errorf("s3: %s %s: %w", op, key, err)
}
