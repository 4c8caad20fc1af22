package libvirt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containerd/errdefs"
)

// A QEMU driver save image (libvirt's qemu_saveimage.h, version 2) starts
// with a fixed header, then data_len bytes that hold the saved definition
// (NUL-terminated), the save cookie right behind it (NUL-terminated, at
// cookieOffset; QEMU's CPU as it ran) and zeros, then QEMU's migration
// stream. libvirt leaves 64 KiB of zeros so that the definition can be
// edited in place (virDomainSaveImageDefineXML does, for changes its ABI
// check allows); the header carries no checksum.
const (
	saveMagic        = "LibvirtQemudSave"
	savePartialMagic = "LibvirtQemudPart" // a save that did not complete
	saveVersion      = 2
	saveHeaderBytes  = len(saveMagic) + 5*4 + 14*4
)

// saveHeader is the header's fields after the magic, in the byte order of
// the host that wrote it (libvirt swaps them when version reads swapped).
type saveHeader struct {
	Version      uint32
	DataLen      uint32
	WasRunning   uint32
	Compressed   uint32
	CookieOffset uint32
	Unused       [14]uint32
}

// CopyStateAs implements virt.Hypervisor: the state file's definition is
// rewritten in the room libvirt leaves for it, with the top-level <name>
// and <uuid> replaced and nothing else touched, and QEMU's stream is
// copied as it is (copy_file_range, a reflink where the filesystem has
// them).
func (c *Conn) CopyStateAs(ctx context.Context, src, dst, name, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.root == "" {
		return fmt.Errorf("copy state %s: %w: the test driver has its own state files", src, errdefs.ErrNotImplemented)
	}
	if !isUUID(id) || name == "" {
		return fmt.Errorf("copy state %s as domain %q with UUID %q: %w: a name and a UUID are needed", src, name, id, errdefs.ErrInvalidArgument)
	}
	return copyStateAs(src, dst, name, id)
}

func copyStateAs(src, dst, name, id string) (retErr error) {
	what := fmt.Sprintf("copy state %s as domain %s", src, name)
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrNotFound)
	}
	defer in.Close()
	head := make([]byte, saveHeaderBytes)
	if _, err := io.ReadFull(in, head); err != nil {
		return fmt.Errorf("%s: header: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	h, data, err := readSaveData(in, head)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	newData, err := renameSaveData(&h, data, name, id)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}

	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
	}
	defer func() {
		if err := out.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
		}
		if retErr != nil {
			_ = os.Remove(dst)
		}
	}()
	var buf bytes.Buffer
	buf.WriteString(saveMagic)
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
	}
	buf.Write(newData)
	if _, err := out.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
	}
	// *os.File's ReadFrom uses copy_file_range from in's offset, which
	// is at the stream now.
	if _, err := out.ReadFrom(in); err != nil {
		return fmt.Errorf("%s: QEMU's stream: %v: %w", what, err, errdefs.ErrInternal)
	}
	return nil
}

// readSaveData checks head and reads the data area that follows it.
func readSaveData(r io.Reader, head []byte) (saveHeader, []byte, error) {
	var h saveHeader
	switch string(head[:len(saveMagic)]) {
	case saveMagic:
	case savePartialMagic:
		return h, nil, errors.New("the save did not complete (its header says partial)")
	default:
		return h, nil, errors.New("not a QEMU state file (no libvirt save header)")
	}
	if err := binary.Read(bytes.NewReader(head[len(saveMagic):]), binary.LittleEndian, &h); err != nil {
		return h, nil, err
	}
	if h.Version != saveVersion {
		return h, nil, fmt.Errorf("save image version %d (or another byte order); this reads version %d", h.Version, saveVersion)
	}
	const maxData = 16 << 20 // a definition and its room, never the stream
	if h.DataLen == 0 || h.DataLen > maxData {
		return h, nil, fmt.Errorf("its definition's area is %d bytes", h.DataLen)
	}
	data := make([]byte, h.DataLen)
	if _, err := io.ReadFull(r, data); err != nil {
		return h, nil, fmt.Errorf("definition: %v", err)
	}
	return h, data, nil
}

// renameSaveData is data (h's) with the definition's name and UUID
// replaced, laid out as libvirt writes it: definition, NUL, cookie, NUL,
// zeros up to the same length; h.CookieOffset follows the definition.
func renameSaveData(h *saveHeader, data []byte, name, id string) ([]byte, error) {
	end := bytes.IndexByte(data, 0)
	if end < 0 {
		return nil, errors.New("its definition is not NUL-terminated")
	}
	def := string(data[:end])
	var cookie []byte
	if h.CookieOffset != 0 {
		if int(h.CookieOffset) >= len(data) || int(h.CookieOffset) <= end {
			return nil, fmt.Errorf("its cookie offset %d is outside the data (definition %d bytes, data %d)", h.CookieOffset, end, len(data))
		}
		c := data[h.CookieOffset:]
		n := bytes.IndexByte(c, 0)
		if n < 0 {
			return nil, errors.New("its cookie is not NUL-terminated")
		}
		cookie = c[:n]
	}
	renamed, err := renameDefinition(def, name, id)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(data))
	out = append(append(out, renamed...), 0)
	if cookie != nil {
		h.CookieOffset = uint32(len(out))
		out = append(append(out, cookie...), 0)
	}
	if len(out) > len(data) {
		return nil, fmt.Errorf("the renamed definition needs %d bytes, and the file has room for %d", len(out), len(data))
	}
	return append(out, make([]byte, len(data)-len(out))...), nil
}

// renameDefinition replaces the text of the domain's own <name> and <uuid>
// (children of <domain>, exactly one each) in a domain XML, byte for byte
// elsewhere: the hypervisor compares the rest with the definition the
// domain is restored with.
func renameDefinition(def, name, id string) (string, error) {
	var escaped strings.Builder
	if err := xml.EscapeText(&escaped, []byte(name)); err != nil {
		return "", err
	}
	values := map[string]string{"name": escaped.String(), "uuid": id}
	// The two elements' texts, in the order they stand.
	type span struct {
		from, to int64
		value    string
	}
	var spans []span
	count := map[string]int{}
	dec := xml.NewDecoder(strings.NewReader(def))
	depth, in, from := 0, "", int64(0)
	for {
		at := dec.InputOffset()
		tok, err := dec.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("its definition: %v", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 && t.Name.Local != "domain" {
				return "", fmt.Errorf("its definition is a <%s>, not a <domain>", t.Name.Local)
			}
			if _, ok := values[t.Name.Local]; ok && depth == 2 && t.Name.Space == "" {
				in, from = t.Name.Local, dec.InputOffset()
			}
		case xml.EndElement:
			if depth == 2 && in != "" {
				spans = append(spans, span{from, at, values[in]})
				count[in]++
				in = ""
			}
			depth--
		}
	}
	if count["name"] != 1 || count["uuid"] != 1 {
		return "", fmt.Errorf("its definition has %d <name> and %d <uuid>; want one of each", count["name"], count["uuid"])
	}
	var b strings.Builder
	last := int64(0)
	for _, sp := range spans {
		b.WriteString(def[last:sp.from])
		b.WriteString(sp.value)
		last = sp.to
	}
	b.WriteString(def[last:])
	renamed := b.String()
	// What was replaced was each element's text and only that (not, say,
	// after an empty <name/>).
	var got struct {
		Name string `xml:"name"`
		UUID string `xml:"uuid"`
	}
	if err := xml.Unmarshal([]byte(renamed), &got); err != nil || got.Name != name || got.UUID != id {
		return "", fmt.Errorf("its definition's <name> and <uuid> could not be replaced (%q, %q, %v)", got.Name, got.UUID, err)
	}
	return renamed, nil
}

// isUUID: s is a UUID in its 36-character form, as libvirt writes them.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'):
			return false
		}
	}
	return true
}
