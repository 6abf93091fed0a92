// Command s3rmbucket removes a bucket and every object in it (perf/run.sh cleans up the
// MinIO bucket of a run with it). Credentials from XETCDN_S3_ACCESS_KEY / XETCDN_S3_SECRET_KEY.
//
//	s3rmbucket -endpoint 127.0.0.1:59000 -bucket xetperf-123
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	endpoint := flag.String("endpoint", "", "S3 endpoint host:port (plain HTTP)")
	bucket := flag.String("bucket", "", "bucket to remove with its objects")
	flag.Parse()
	if *endpoint == "" || *bucket == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: s3rmbucket -endpoint HOST:PORT -bucket NAME")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := minio.New(*endpoint, &minio.Options{Creds: credentials.NewStaticV4(os.Getenv("XETCDN_S3_ACCESS_KEY"), os.Getenv("XETCDN_S3_SECRET_KEY"), "")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "s3rmbucket: %v\n", err)
		os.Exit(1)
	}
	if ok, err := c.BucketExists(ctx, *bucket); err != nil {
		fmt.Fprintf(os.Stderr, "s3rmbucket: %v\n", err)
		os.Exit(1)
	} else if !ok {
		return // nothing to remove
	}
	n := 0
	objs := c.ListObjects(ctx, *bucket, minio.ListObjectsOptions{Recursive: true})
	for e := range c.RemoveObjects(ctx, *bucket, objs, minio.RemoveObjectsOptions{}) {
		fmt.Fprintf(os.Stderr, "s3rmbucket: remove %s: %v\n", e.ObjectName, e.Err)
		n++
	}
	if err := c.RemoveBucket(ctx, *bucket); err != nil && minio.ToErrorResponse(err).Code != "NoSuchBucket" {
		fmt.Fprintf(os.Stderr, "s3rmbucket: %v\n", err)
		os.Exit(1)
	}
	if n > 0 {
		os.Exit(1)
	}
}
