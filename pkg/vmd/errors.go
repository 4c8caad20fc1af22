package vmd

import "fmt"

// errorf is fmt.Errorf with class (an errdefs error) wrapped at the end.
func errorf(class error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, class)...)
}
