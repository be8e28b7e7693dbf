package httpapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// TestExportReplyFiles: a done job with a files archive shows its link
// (the job's link with part=files), sha256 and size; a job without one,
// or not done, shows none of them.
func TestExportReplyFiles(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_796_000_000, 0)
	x := exportLinks{link: func(job, user string, exp time.Time) string {
		return "/download/" + job + "?u=" + user + "&exp=" + strconv.FormatInt(exp.Unix(), 10)
	}, now: func() time.Time { return now }}
	sha := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		job  parley.ExportJob
		want string // the files keys, "" for none
	}{
		{"with files", parley.ExportJob{State: parley.ExportDone, FilesSHA256: sha, FilesBytes: 42},
			`"files_url":"/download/j1?u=ana\u0026exp=1796000300\u0026part=files","files_sha256":"` + sha + `","files_bytes":42`},
		{"without files", parley.ExportJob{State: parley.ExportDone}, ""},
		{"running", parley.ExportJob{State: parley.ExportRunning, FilesSHA256: sha, FilesBytes: 42}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.job.ID, tt.job.User, tt.job.SHA256, tt.job.Bytes = "j1", "ana", sha, 7
			b, err := json.Marshal(x.reply(tt.job))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); (tt.want == "") != !strings.Contains(got, `"files_`) || !strings.Contains(got, tt.want) {
				t.Errorf("reply %s, want it to hold %s", got, tt.want)
			}
		})
	}
}
