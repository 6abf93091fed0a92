// Command hello is the command TestBuild builds: it prints one line.
package main

import "fmt"

func main() { fmt.Println("hello from testenv") }
