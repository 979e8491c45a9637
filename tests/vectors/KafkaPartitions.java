// Kafka's own answer for the partitions vectors: reads one key a line (hex of its UTF-8
// bytes), turns it into a Java String and back through Kafka's StringSerializer, and prints
// the key, Utils.murmur2 of it and BuiltInPartitioner.partitionForKey for each partition
// count given as an argument. Run by generate.py:
//   java -cp kafka-clients-X.jar tests/vectors/KafkaPartitions.java 8 12 < keys
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

public class KafkaPartitions {
    public static void main(String[] args) throws Exception {
        StringSerializer serializer = new StringSerializer();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        HexFormat hex = HexFormat.of();
        String line;
        while ((line = in.readLine()) != null) {
            String key = new String(hex.parseHex(line.trim()), StandardCharsets.UTF_8);
            byte[] bytes = serializer.serialize("loopwarden.decisions", key);
            StringBuilder out = new StringBuilder(hex.formatHex(bytes)).append(' ').append(Utils.murmur2(bytes));
            for (String n : args) {
                out.append(' ').append(BuiltInPartitioner.partitionForKey(bytes, Integer.parseInt(n)));
            }
            System.out.println(out);
        }
    }
}
