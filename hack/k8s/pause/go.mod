module felix.dev/felix/hack/k8s/pause

go 1.26.0
