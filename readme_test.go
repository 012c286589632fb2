package redisync

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
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
