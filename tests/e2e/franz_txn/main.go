// A transactional franz-go producer for test_transactions_unsupported.py: begins a
// transaction and produces one record, printing how long it took and the error.
// Usage: franztxn <bootstrap> <transactional id> <topic>
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(os.Args[1]),
		kgo.TransactionalID(os.Args[2]),
		kgo.DefaultProduceTopic(os.Args[3]),
	)
	if err != nil {
		fmt.Println("client:", err)
		os.Exit(3)
	}
	defer cl.Close()
	start := time.Now()
	if err := cl.BeginTransaction(); err != nil {
		fmt.Printf("elapsed=%.2f begin: %v\n", time.Since(start).Seconds(), err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	fmt.Printf("elapsed=%.2f produce: %v\n", time.Since(start).Seconds(), err)
	if err != nil {
		os.Exit(2)
	}
}
