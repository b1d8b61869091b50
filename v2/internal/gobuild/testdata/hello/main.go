// Command hello is what gobuild's tests build.
package main

import "fmt"

func main() { fmt.Println("hello from a built program") }
