module github.com/starcomm/starcomm

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/stretchr/testify v1.12.1
	github.com/xtaci/smux v1.5.58
	golang.org/x/sys v0.47.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
