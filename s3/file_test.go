package s3_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parleychat/parley"
	"github.com/parleychat/parley/blobtest"
	"github.com/parleychat/parley/s3"
)

// server is the S3 server of PARLEY_TEST_S3, written
// http://ACCESS:SECRET@HOST:PORT (https:// for TLS); the tests skip
// without it. .ci/run starts Versity's gateway and sets it.
type server struct {
	endpoint       string
	secure         bool
	access, secret string
}

func testServer(t *testing.T) server {
	t.Helper()
	raw := os.Getenv("PARLEY_TEST_S3")
	if raw == "" {
		t.Skip("PARLEY_TEST_S3 is not set (e.g. http://KEY:SECRET@127.0.0.1:7070, a versitygw posix gateway): S3 tests skipped")
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		t.Fatalf("PARLEY_TEST_S3=%q: want http://ACCESS:SECRET@HOST:PORT", raw)
	}
	secret, _ := u.User.Password()
	return server{endpoint: u.Host, secure: u.Scheme == "https", access: u.User.Username(), secret: secret}
}

// getenv hands the server's credentials to s3.Open as the environment would.
func (srv server) getenv(name string) string {
	return map[string]string{"PARLEY_S3_ACCESS_KEY": srv.access, "PARLEY_S3_SECRET_KEY": srv.secret}[name]
}

// url names bucket (and a folder of it) on the server.
func (srv server) url(bucket, prefix string) string {
	q := url.Values{"endpoint": {srv.endpoint}, "region": {"us-east-1"}}
	if !srv.secure {
		q.Set("secure", "false")
	}
	return "s3://" + bucket + "/" + prefix + "?" + q.Encode()
}

func (srv server) client(t *testing.T) *minio.Client {
	t.Helper()
	c, err := minio.New(srv.endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(srv.access, srv.secret, ""),
		Secure:       srv.secure,
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newBucket creates a bucket of its own for the test and removes it, with
// whatever the test left in it, at cleanup.
func (srv server) newBucket(t *testing.T) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	bucket := "parley-test-" + hex.EncodeToString(b[:])
	c := srv.client(t)
	ctx := context.Background()
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("creating bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() {
		for up := range c.ListIncompleteUploads(ctx, bucket, "", true) {
			if up.Err == nil {
				c.RemoveIncompleteUpload(ctx, bucket, up.Key)
			}
		}
		objects := c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
		for e := range c.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
			t.Errorf("cleaning bucket %s: %v", bucket, e.Err)
		}
		if err := c.RemoveBucket(ctx, bucket); err != nil {
			t.Errorf("removing bucket %s: %v", bucket, err)
		}
	})
	return bucket
}

func (srv server) open(t *testing.T, bucket, prefix string) *s3.Store {
	t.Helper()
	s, err := s3.Open(context.Background(), srv.url(bucket, prefix), srv.getenv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	srv := testServer(t)
	blobtest.Run(t, func(t *testing.T) parley.BlobStore { return srv.open(t, srv.newBucket(t), "") })
}

// The suite again on a folder of a bucket shared with other data.
func TestContractInFolder(t *testing.T) {
	srv := testServer(t)
	blobtest.Run(t, func(t *testing.T) parley.BlobStore {
		bucket := srv.newBucket(t)
		_, err := srv.client(t).PutObject(context.Background(), bucket, "other/k", strings.NewReader("not ours"), 8, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return srv.open(t, bucket, "deploy/files")
	})
}

// Stores on two folders of one bucket do not see each other's blobs, and a
// store of the whole bucket skips the objects that are not keys.
func TestFolders(t *testing.T) {
	srv := testServer(t)
	ctx := context.Background()
	bucket := srv.newBucket(t)
	a, b, whole := srv.open(t, bucket, "a"), srv.open(t, bucket, "b/c"), srv.open(t, bucket, "")
	for _, s := range []*s3.Store{a, b, whole} {
		if _, _, err := s.Put(ctx, "k", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*s3.Store{"b/c": b, "whole": whole} {
		var keys []string
		if err := s.List(ctx, "", func(bl parley.Blob) error { keys = append(keys, bl.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || keys[0] != "k" {
			t.Errorf("store %s lists %v, want [k]", name, keys)
		}
		if _, err := s.Stat(ctx, "k"); err != nil {
			t.Errorf("store %s lost its k to a delete in another folder: %v", name, err)
		}
	}
}

// A Put that fails after its first part was uploaded leaves no multipart
// upload behind to hold the server's disk.
func TestFailedPutAbortsUpload(t *testing.T) {
	srv := testServer(t)
	bucket := srv.newBucket(t)
	s := srv.open(t, bucket, "")
	ctx, cancel := context.WithCancel(context.Background())
	r := io.MultiReader(io.LimitReader(zeros{}, 2*s3.PartSize), &cancelling{cancel})
	if _, _, err := s.Put(ctx, "k", r); err == nil {
		t.Fatal("a Put cancelled after two parts succeeded")
	}
	if _, _, err := s.Put(context.Background(), "k", io.MultiReader(io.LimitReader(zeros{}, s3.PartSize+1), failing{})); err == nil {
		t.Fatal("a Put whose reader failed after a part succeeded")
	}
	for up := range srv.client(t).ListIncompleteUploads(context.Background(), bucket, "", true) {
		if up.Err != nil {
			t.Fatal(up.Err)
		}
		t.Errorf("an upload of %s was left open", up.Key)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("the client went away") }

// cancelling cancels its context when read, then yields zeros: the Put
// must notice the context, not the reader.
type cancelling struct{ cancel context.CancelFunc }

func (c *cancelling) Read(p []byte) (int, error) { c.cancel(); clear(p); return len(p), nil }

func TestOpenRefuses(t *testing.T) {
	srv := testServer(t)
	bucket := srv.newBucket(t)
	ctx := context.Background()
	none := func(string) string { return "" }
	wrong := func(name string) string {
		return map[string]string{"PARLEY_S3_ACCESS_KEY": srv.access, "PARLEY_S3_SECRET_KEY": "not-the-secret"}[name]
	}
	half := func(name string) string {
		return map[string]string{"PARLEY_S3_ACCESS_KEY": srv.access}[name]
	}
	for _, tc := range []struct {
		name, url string
		getenv    func(string) string
		want      string
	}{
		{"missing bucket", srv.url("parley-test-none", ""), srv.getenv, "does not exist"},
		{"no credentials", srv.url(bucket, ""), none, "no credentials"},
		{"half the credentials", srv.url(bucket, ""), half, "set both"},
		{"wrong secret", srv.url(bucket, ""), wrong, "bucket " + bucket},
		{"credentials in the URL", "s3://k:s@" + bucket + "?endpoint=" + srv.endpoint, srv.getenv, "do not belong in the URL"},
		{"another scheme", "http://" + srv.endpoint + "/" + bucket, srv.getenv, "want s3://"},
		{"unknown parameter", srv.url(bucket, "") + "&pathstyle=1", srv.getenv, "unknown parameter"},
		{"bad secure", "s3://" + bucket + "?secure=no", srv.getenv, "want true or false"},
		{"bad prefix", "s3://" + bucket + "/a/../b?endpoint=" + srv.endpoint, srv.getenv, "bad prefix"},
	} {
		_, err := s3.Open(ctx, tc.url, tc.getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open(%s) = %v, want an error saying %q", tc.name, tc.url, err, tc.want)
		}
	}
}

// Without PARLEY_S3_*, the AWS variables are the credentials.
func TestAWSCredentials(t *testing.T) {
	srv := testServer(t)
	bucket := srv.newBucket(t)
	aws := func(name string) string {
		return map[string]string{"AWS_ACCESS_KEY_ID": srv.access, "AWS_SECRET_ACCESS_KEY": srv.secret}[name]
	}
	s, err := s3.Open(context.Background(), srv.url(bucket, ""), aws)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(context.Background(), "k", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
}
