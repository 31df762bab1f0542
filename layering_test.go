package starcomm_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayering enforces the import rules of the package layering: arrows point down the
// package table; star never imports a driver, net or os; only tests import
// testkit; production code never imports testing.
func TestLayering(t *testing.T) {
	const mod = "github.com/starcomm/starcomm/"
	forbidden := map[string][]string{
		"comm":             {mod, "net", "os", "testing"},
		"transport":        {mod, "net", "os", "testing"},
		"transport/pipe":   {mod + "star", mod + "comm", mod + "testkit", mod + "shm", "testing"},
		"transport/tcp":    {mod + "star", mod + "comm", mod + "testkit", mod + "shm", "testing"},
		"transport/faulty": {mod + "star", mod + "comm", mod + "testkit", mod + "shm", "testing"},
		"transport/mtls":   {mod + "star", mod + "comm", mod + "testkit", mod + "shm", "testing"},
		"star":             {mod + "transport/", mod + "testkit", mod + "shm", "net", "os", "testing"},
		"shm":              {mod + "star", mod + "transport", mod + "testkit", "testing"},
	}
	allowed := map[string][]string{
		"comm":      {},
		"transport": {},
		"star":      {mod + "comm", mod + "transport"},
	}
	for pkg, bad := range forbidden {
		if _, err := os.Stat(pkg); err != nil {
			continue // not built yet
		}
		// Module packages: every transitive dependency counts. Standard
		// library: only direct imports (fmt itself imports os).
		deps := goList(t, "-deps", "./"+pkg)
		direct := goList(t, "-f", "{{join .Imports \"\\n\"}}", "./"+pkg)
		check := func(dep string, stdlib bool) {
			if dep == mod+pkg || strings.HasPrefix(dep, mod) == stdlib {
				return
			}
			for _, a := range allowed[pkg] {
				if dep == a {
					return
				}
			}
			for _, b := range bad {
				if dep == b || (strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b)) {
					t.Errorf("%s must not depend on %s", pkg, dep)
				}
			}
		}
		for _, d := range deps {
			check(d, false)
		}
		for _, d := range direct {
			check(d, true)
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// TestExportedNamesDocumented fails for any exported top-level name, method
// or package without a doc comment.
func TestExportedNamesDocumented(t *testing.T) {
	fset := token.NewFileSet()
	pkgDoc := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, seen := pkgDoc[dir]; !seen {
			pkgDoc[dir] = false
		}
		if f.Doc != nil {
			pkgDoc[dir] = true
		}
		if f.Name.Name == "main" {
			return nil
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && d.Doc == nil && (d.Recv == nil || receiverExported(d.Recv)) {
					if !isInterfaceMethod(d) {
						t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
					}
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
							t.Errorf("%s: type %s has no doc comment", fset.Position(s.Pos()), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
								t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, ok := range pkgDoc {
		if !ok {
			t.Errorf("package in %s has no package doc comment", dir)
		}
	}
}

func receiverExported(fl *ast.FieldList) bool {
	if len(fl.List) == 0 {
		return false
	}
	typ := fl.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}

// isInterfaceMethod lets the standard methods whose meaning is fixed by an
// interface (Error, Unwrap, String) go without a comment.
func isInterfaceMethod(d *ast.FuncDecl) bool {
	if d.Recv == nil {
		return false
	}
	switch d.Name.Name {
	case "Error", "Unwrap", "String", "Network":
		return true
	}
	return false
}
