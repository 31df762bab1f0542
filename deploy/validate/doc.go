// Package validate checks the recipes of deploy/ with the tools their
// formats have, in a module of its own so that the main module's
// dependencies stay as they are:
//
//   - the Kubernetes manifest is decoded strictly (unknown or misspelt
//     fields, wrong types and duplicate keys are errors) into the API's own
//     Go types (k8s.io/api), and its wiring is checked: an Indexed Job, a
//     headless Service the pods are a subdomain of, rank 0's name, the size;
//   - compose.yaml is loaded by compose-go, the reference implementation of
//     the Compose specification, which validates it against the
//     specification's JSON schema, and its ranks are checked;
//   - the Dockerfile's build stage is run as written (CGO_ENABLED=0 go
//     build) and the binary checked to be static, its final stage to be
//     distroless or scratch.
//
// Each recipe's environment is also read by starcomm.ConfigFromEnviron, as
// every rank would read it, and, where root, unshare and ip are available,
// the Kubernetes and Compose jobs run: four starbench processes with the
// recipe's environment and arguments in a network namespace of their own
// whose /etc/hosts maps rank 0's name to its loopback. Run it from this
// directory: go test ./...
package validate
