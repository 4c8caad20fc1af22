package vmspec_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// docRow matches a row of the table in docs/annotations.md:
// | `key` | type | `default` | `example` | meaning |
var docRow = regexp.MustCompile("^\\| *`(vmpod\\.io/[^`]+)` *\\|([^|]*)\\|([^|]*)\\|([^|]*)\\|")

// TestAnnotationsDoc keeps docs/annotations.md and annotations.go in step:
// the same keys in the same order, with the same type, accepted values,
// default and example.
func TestAnnotationsDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/annotations.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []vmspec.AnnotationInfo
	for line := range strings.SplitSeq(string(doc), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := vmspec.AnnotationInfo{Key: m[1], Default: unquote(m[3]), Example: unquote(m[4])}
		typ := strings.TrimSpace(m[2])
		if rest, ok := strings.CutPrefix(typ, "enum: "); ok {
			a.Type = "enum"
			for v := range strings.SplitSeq(rest, ",") {
				a.Values = append(a.Values, unquote(v))
			}
		} else {
			a.Type = typ
		}
		got = append(got, a)
	}
	if diff := cmp.Diff(vmspec.Annotations, got); diff != "" {
		t.Errorf("docs/annotations.md disagrees with annotations.go (-code +doc):\n%s", diff)
	}
}

func unquote(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
