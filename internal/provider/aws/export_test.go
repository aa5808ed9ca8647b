package aws

import "reflect"

// EC2Actions are the EC2 actions the provider can call: the methods of ec2API, the only way
// the provider reaches EC2.
func EC2Actions() []string {
	t := reflect.TypeFor[ec2API]()
	out := make([]string, t.NumMethod())
	for i := range out {
		out[i] = t.Method(i).Name
	}
	return out
}
