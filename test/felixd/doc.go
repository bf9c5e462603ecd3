// Package felixd_test is the end-to-end suite of felixd: two `felix
// felixd` processes holding one workload's lease against a real standalone
// `felix broker` process and a real kube-apiserver (envtest). It checks
// seed 004's StaleTrimRefused on the stream's final contents.
package felixd_test
