package libvirt

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"libvirt.org/go/libvirtxml"
)

// savedDef is a definition as libvirt writes one into a save image: the
// name and UUID first, the rest untouched by a rename.
const savedDef = `<domain type='qemu'>
  <name>vmpod-ns_first</name>
  <uuid>0b3c6c1e-2f4e-4c1a-9a53-6f7d5f1a2b3c</uuid>
  <metadata>
    <vmpod:pod xmlns:vmpod="https://vmpod.io/xmlns/pod/1"><name>not&lt;this</name></vmpod:pod>
  </metadata>
  <memory unit='KiB'>262144</memory>
  <devices>
    <interface type='ethernet'><mac address='52:54:00:12:34:56'/><target dev='t0'/><model type='virtio'/></interface>
  </devices>
</domain>
`

const savedCookie = "<qemu-migration><cpu mode='custom'/></qemu-migration>\n"

// saveImage lays out a version 2 save image the way libvirt writes one:
// header, definition, cookie, 64 KiB of room, then the stream.
func saveImage(t testing.TB, def, cookie string, stream []byte) []byte {
	t.Helper()
	h := saveHeader{Version: saveVersion, WasRunning: 1}
	data := append([]byte(def), 0)
	if cookie != "" {
		h.CookieOffset = uint32(len(data))
		data = append(append(data, cookie...), 0)
	}
	data = append(data, make([]byte, 64<<10)...)
	h.DataLen = uint32(len(data))
	var b bytes.Buffer
	b.WriteString(saveMagic)
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	b.Write(data)
	b.Write(stream)
	return b.Bytes()
}

// TestCopyStateAs: the copy's definition has the new name and UUID and is
// byte for byte the same elsewhere (the metadata's own <name> too); the
// cookie, the header's other fields, the data area's length and QEMU's
// stream are the source's.
func TestCopyStateAs(t *testing.T) {
	dir := t.TempDir()
	stream := bytes.Repeat([]byte("QEVM\x00\x01stream"), 50000)
	src := filepath.Join(dir, "vm.state")
	orig := saveImage(t, savedDef, savedCookie, stream)
	if err := os.WriteFile(src, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "copy.state")
	const id = "7d444840-9dc0-11d1-b245-5ffdce74fad2"
	if err := copyStateAs(src, dst, "vmpod-ns_second", id); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(orig) {
		t.Fatalf("copy is %d bytes, the source %d: want the same layout", len(got), len(orig))
	}
	h, data, err := readSaveData(bytes.NewReader(got[saveHeaderBytes:]), got[:saveHeaderBytes])
	if err != nil {
		t.Fatal(err)
	}
	def := string(data[:bytes.IndexByte(data, 0)])
	want := strings.Replace(strings.Replace(savedDef, "vmpod-ns_first", "vmpod-ns_second", 1),
		"0b3c6c1e-2f4e-4c1a-9a53-6f7d5f1a2b3c", id, 1)
	if def != want {
		t.Errorf("renamed definition:\n%s\nwant:\n%s", def, want)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(def); err != nil || d.Name != "vmpod-ns_second" || d.UUID != id {
		t.Errorf("the copy's definition parses as %q %q (%v)", d.Name, d.UUID, err)
	}
	if c := data[h.CookieOffset:]; string(c[:bytes.IndexByte(c, 0)]) != savedCookie {
		t.Errorf("cookie at %d: %q", h.CookieOffset, c[:bytes.IndexByte(c, 0)])
	}
	if h.WasRunning != 1 || int(h.DataLen) != len(data) {
		t.Errorf("header %+v", h)
	}
	if !bytes.Equal(got[len(got)-len(stream):], stream) {
		t.Error("QEMU's stream differs in the copy")
	}
	// The copy is made once: dst exists now.
	if err := copyStateAs(src, dst, "x", id); err == nil {
		t.Error("a copy over an existing file was made")
	}
}

// TestCopyStateAsRefuses: what is not a whole save image, or has no room
// for the new name, is refused as bad input and leaves no file.
func TestCopyStateAsRefuses(t *testing.T) {
	const id = "7d444840-9dc0-11d1-b245-5ffdce74fad2"
	img := saveImage(t, savedDef, savedCookie, []byte("stream"))
	partial := append([]byte(savePartialMagic), img[len(saveMagic):]...)
	v1 := bytes.Clone(img)
	binary.LittleEndian.PutUint32(v1[len(saveMagic):], 1)
	twoNames := saveImage(t, strings.Replace(savedDef, "<memory", "<name>again</name><memory", 1), "", nil)
	for _, tc := range []struct {
		name, want string
		file       []byte
		newName    string
	}{
		{"empty", "header", nil, "n"},
		{"not a state file", "no libvirt save header", bytes.Repeat([]byte{1}, 200), "n"},
		{"partial", "did not complete", partial, "n"},
		{"version 1", "version 1", v1, "n"},
		{"truncated definition", "definition", img[:saveHeaderBytes+100], "n"},
		{"two names", "2 <name>", twoNames, "n"},
		{"no room", "has room for", img, strings.Repeat("n", 70<<10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "in"), filepath.Join(dir, "out")
			if err := os.WriteFile(src, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			err := copyStateAs(src, dst, tc.newName, id)
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want InvalidArgument saying %q", err, tc.want)
			}
			if _, err := os.Stat(dst); !os.IsNotExist(err) {
				t.Errorf("a failed copy left %s (%v)", dst, err)
			}
		})
	}
}

// FuzzRenameSaveData: whatever the data area holds, a rename either fails
// or gives an area of the same length whose definition has the new name.
func FuzzRenameSaveData(f *testing.F) {
	img := saveImage(f, savedDef, savedCookie, nil)
	f.Add(img[saveHeaderBytes:], uint32(len(savedDef)+1))
	f.Add([]byte("<domain><name>a</name><uuid>b</uuid></domain>\x00"), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, cookieOffset uint32) {
		h := saveHeader{Version: saveVersion, DataLen: uint32(len(data)), CookieOffset: cookieOffset}
		out, err := renameSaveData(&h, data, "vmpod-ns_second", "7d444840-9dc0-11d1-b245-5ffdce74fad2")
		if err != nil {
			return
		}
		if len(out) != len(data) {
			t.Fatalf("renamed area is %d bytes, the source %d", len(out), len(data))
		}
		if !bytes.Contains(out, []byte("<name>vmpod-ns_second</name>")) {
			t.Fatalf("renamed area lacks the new name: %q", out)
		}
	})
}
