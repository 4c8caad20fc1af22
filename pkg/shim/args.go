package shim

import "os"

func setArgs(argv0 string, args []string) {
	os.Args = append([]string{argv0}, args...)
}
