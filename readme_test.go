package redisync

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every example the README names exists, so that its tables cannot point
// to an example that was renamed or removed. "goredis/ExampleX" names an
// example of module goredis.
func TestREADMEExamplesExist(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func (Example\w*)\(`)
	for _, dir := range []string{".", "goredis"} {
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range funcs.FindAllSubmatch(src, -1) {
				defined[filepath.ToSlash(filepath.Join(dir, string(m[1])))] = true
			}
		}
	}
	named := regexp.MustCompile("`((?:goredis/)?Example\\w*)`").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, named)
	for _, m := range named {
		require.True(t, defined[string(m[1])], "README names %s, which is not an example", m[1])
	}
}
