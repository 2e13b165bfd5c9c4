// A transactional franz-go producer for test_transactions.py: commits a transaction of
// five records, then aborts one of one record, and prints what happened.
// Usage: franztxn <bootstrap> <transactional id> <topic>
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fail(step string, err error) {
	fmt.Printf("%s: %v\n", step, err)
	os.Exit(2)
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	for _, commit := range []bool{true, false} {
		if err := cl.BeginTransaction(); err != nil {
			fail("begin", err)
		}
		n := 5
		prefix := "franz-commit"
		if !commit {
			n, prefix = 1, "franz-abort"
		}
		for i := 0; i < n; i++ {
			v := []byte(fmt.Sprintf("%s-%d", prefix, i))
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
				fail("produce", err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			fail("end", err)
		}
	}
	fmt.Printf("ok elapsed=%.2f\n", time.Since(start).Seconds())
}
