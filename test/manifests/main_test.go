package manifests

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain keeps the apiserver's klog output to errors: at info level it
// logs thousands of lines.
func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "ERROR"} {
		if err := fs.Set(k, v); err != nil {
			panic(err)
		}
	}
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}
