package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

var versionCommand = &command{
	name:     "version",
	synopsis: "",
	summary:  "print the version of the command",
	help: `
Prints the version of the module the command was built from (as go install
records it; "(devel)" for a build from a clone, followed by its revision
when the build recorded one), the Go version and the platform.`,
	flags: func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, args []string, stdout io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "redisync %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		}
	},
}

// version is the module version of the build, or "(devel)" and the
// revision for a build from a clone.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	v = "(devel)"
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" {
		v += " " + rev[:min(len(rev), 12)] + dirty
	}
	return v
}
