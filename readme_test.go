package redisync

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEListsEveryOption: every Option and LockOption of the package
// has a row in a table of the README.
func TestREADMEListsEveryOption(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	require.NoError(t, err)
	var options []string
	for _, f := range pkgs["redisync"].Files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && (id.Name == "Option" || id.Name == "LockOption") {
				options = append(options, fn.Name.Name)
			}
		}
	}
	require.Contains(t, options, "WithReplicaAck")
	for _, o := range options {
		require.Regexp(t, regexp.MustCompile("(?m)^\\| `"+o+"\\("), string(readme), "%s has no row in a README table", o)
	}
}

// Every example the README names exists, so that its tables cannot point
// to an example that was renamed or removed. "goredis/ExampleX" names an
// example of module goredis, "redisson/ExampleX" one of package redisson.
func TestREADMEExamplesExist(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func (Example\w*)\(`)
	for _, dir := range []string{".", "goredis", "redisson"} {
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
	named := regexp.MustCompile("`((?:goredis/|redisson/)?Example\\w*)`").FindAllSubmatch(readme, -1)
	require.NotEmpty(t, named)
	for _, m := range named {
		require.True(t, defined[string(m[1])], "README names %s, which is not an example", m[1])
	}
}

// TestREADMEQuickstartCompiles builds the README's quickstart, the first Go
// block after "## Quickstart", as the program it says it is: a package of
// its own inside this module, vetted and type-checked by the go command.
func TestREADMEQuickstartCompiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "\n## Quickstart\n")
	require.True(t, ok, "no Quickstart section")
	_, block, ok := strings.Cut(after, "\n```go\n")
	require.True(t, ok, "no Go block in the Quickstart")
	src, _, ok := strings.Cut(block, "\n```\n")
	require.True(t, ok, "unterminated Go block")
	require.True(t, strings.HasPrefix(src, "package main\n"), "the quickstart is not a complete program")

	dir, err := os.MkdirTemp(".", "quickstart")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src+"\n"), 0o644))
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goCmd, "vet", "./"+filepath.ToSlash(dir))
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README's quickstart does not compile:\n%s", out)
}
