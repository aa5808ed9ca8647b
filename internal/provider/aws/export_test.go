package aws

import "reflect"

// EC2Actions are the EC2 actions the provider can call: the methods of ec2API, the only way
// the provider reaches EC2.
func EC2Actions() []string { return methods(reflect.TypeFor[ec2API]()) }

// ELBActions are the ELBv2 actions the provider can call: the methods of elbAPI.
func ELBActions() []string { return methods(reflect.TypeFor[elbAPI]()) }

func methods(t reflect.Type) []string {
	out := make([]string, t.NumMethod())
	for i := range out {
		out[i] = t.Method(i).Name
	}
	return out
}
