// Package hostcaps loads the golden host captures under pkg/host/testdata
// for the tests of every package that needs a real node's description:
// for each capture NAME, the capabilities XML libvirt gave
// (NAME.caps.xml), its domain capabilities XML (NAME.domcaps.xml; libvirt's
// test driver has none) and the Host pkg/host's Parse made of them
// (NAME.golden.json, rewritten by `go test ./pkg/host -update`).
//
// It does not import pkg/host, so that pkg/host's own tests can use it:
// Golden decodes into the type the caller names, host.Host elsewhere.
//
// Imports: the standard library and internal/testenv/repo.
package hostcaps
