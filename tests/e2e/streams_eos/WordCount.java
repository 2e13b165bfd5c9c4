// A Kafka Streams word count under processing.guarantee=exactly_once_v2, for the e2e test
// tests/e2e/test_kafka_streams.py (issue 16). Single file, no build tool: the test compiles it
// with `javac -cp '.tools/kafka/libs/*'` against the same Apache Kafka jars as the suite.
//
//   java -cp <classes>:.tools/kafka/libs/* WordCount BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR STOP_FILE MAX_SECONDS
//
// Topology: INPUT (null keys, values "w1 w2 ...") -> flatMapValues(split) -> groupBy(word)
// (a repartition topic) -> count() (a compacted changelog topic) -> OUTPUT (String -> Long),
// with the record cache off, so every count is emitted.
// Prints "RUNNING" each time the instance reaches state RUNNING, "STATE <old> -> <new>" on every
// transition, and closes cleanly when STOP_FILE exists or MAX_SECONDS have passed. Exit code 0
// after a clean close, 1 if the instance went to ERROR or did not close in time.

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public final class WordCount {
    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: WordCount BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR STOP_FILE MAX_SECONDS");
            System.exit(2);
        }
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3];
        String stateDir = args[4];
        Path stopFile = Paths.get(args[5]);
        long maxMillis = Long.parseLong(args[6]) * 1000L;

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // No record cache: every increment is forwarded, so the committed output of a word is
        // exactly 1, 2, ..., n (the test checks that), and a transaction open at a crash holds
        // output records (not only repartition ones) that must never become visible.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Consumed repartition records are deleted (DeleteRecords) after a commit at most this
        // often; the default, 30 s, is longer than a test run.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        // A killed instance's open transaction blocks read_committed readers (the restarted
        // instance's repartition consumer, the test's output reader) until it is aborted: keep
        // the timeout short. (A restart with the same state dir keeps the process id, hence the
        // transactional.id, and fences the old transaction at once anyway.)
        props.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        // Streams lingers 100 ms by default, as long as a commit interval here: records would
        // reach the broker just before their commit, and a kill would almost never leave an
        // open transaction with records in the log. Send them at once instead.
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        // A killed member must leave the group quickly, or the restarted one waits for it.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.trim().split("\\s+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        AtomicBoolean failed = new AtomicBoolean(false);
        streams.setStateListener((newState, oldState) -> {
            System.out.println("STATE " + oldState + " -> " + newState);
            if (newState == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
            }
            if (newState == KafkaStreams.State.ERROR) {
                failed.set(true);
            }
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + e);
            e.printStackTrace(System.out);
            System.out.flush();
            // A stream thread that died on a transient broker error (a broker restart) is
            // replaced; exactly-once does not depend on it, the transactions do.
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });

        long deadline = System.currentTimeMillis() + maxMillis;
        streams.start();
        while (!Files.exists(stopFile) && System.currentTimeMillis() < deadline && !failed.get()) {
            Thread.sleep(100);
        }
        String why = Files.exists(stopFile) ? "stop file" : failed.get() ? "state ERROR" : "time limit";
        System.out.println("CLOSING (" + why + ")");
        System.out.flush();
        boolean closed = streams.close(Duration.ofSeconds(30));
        System.out.println(closed ? "CLOSED" : "CLOSE TIMED OUT");
        System.out.flush();
        System.exit(closed && !failed.get() ? 0 : 1);
    }
}
