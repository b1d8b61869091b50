// Command broken does not compile: gobuild's tests check that its failure
// names the package and shows the compiler's message.
package main

func main() {
	var n int = "not a number"
	_ = n
}
