"""An S3 endpoint's own ranged-GET rate: the ceiling of a catch-up read against it.

Ranged GETs of 1, 4 and 11 MiB (a sealed object's partition range) from the largest object
under a prefix, one and eight at a time; prints GETs/s and MiB/s for each. Measured on moto
(issue 17): ~12.5 GETs/s whatever their size, so there a reader's rate is its bytes per GET.

  .venv/bin/python loadtest/scripts/s3_get_rate.py --endpoint http://127.0.0.1:47500 \\
      --bucket cubench --prefix new/
"""

import argparse
import concurrent.futures as cf
import time

import boto3
import botocore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--gets", type=int, default=16, help="GETs per measurement")
    args = ap.parse_args()
    s3 = boto3.client(
        "s3",
        endpoint_url=args.endpoint,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        region_name="us-east-1",
        config=botocore.config.Config(max_pool_connections=16),
    )
    objs = s3.list_objects_v2(Bucket=args.bucket, Prefix=args.prefix)["Contents"]
    biggest = max(objs, key=lambda o: o["Size"])
    key, size = biggest["Key"], biggest["Size"]

    def get(rng: tuple[int, int]) -> int:
        start, length = rng
        r = s3.get_object(Bucket=args.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
        return len(r["Body"].read())

    for piece in (1 << 20, 4 << 20, 11 << 20):
        if piece >= size:
            continue
        for at_once in (1, 8):
            ranges = [((i * piece) % (size - piece), piece) for i in range(args.gets)]
            started = time.time()
            with cf.ThreadPoolExecutor(at_once) as ex:
                got = sum(ex.map(get, ranges))
            took = time.time() - started
            print(
                f"object {size >> 20} MiB, range {piece >> 20} MiB, {at_once} at once: "
                f"{args.gets / took:.1f} GET/s, {got / took / 2**20:.1f} MiB/s"
            )


if __name__ == "__main__":
    main()
